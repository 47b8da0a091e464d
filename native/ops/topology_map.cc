#include "ops/topology_map.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <sstream>

#include "common/status.h"

namespace herring {

const char* LinkKindName(LinkKind kind) {
  switch (kind) {
    case LinkKind::kSwitch: return "switch";
    case LinkKind::kShared: return "shared";
    case LinkKind::kDirect: return "direct";
  }
  return "?";
}

// --- the description ------------------------------------------------------------------------

double ParseRateBps(const std::string& text, const std::string& what) {
  std::string t;
  for (char c : text) {
    if (!std::isspace(static_cast<unsigned char>(c))) t += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  if (t.empty() || t == "none" || t == "unlimited") return 0;
  char* end = nullptr;
  double x = std::strtod(t.c_str(), &end);
  std::string unit(end ? end : "");
  static const std::map<std::string, double> units = {
      {"", 1},       {"bit", 1},     {"kbit", 1e3},  {"mbit", 1e6},  {"gbit", 1e9}, {"tbit", 1e12},
      {"bps", 8},    {"kbps", 8e3},  {"mbps", 8e6},  {"gbps", 8e9},  {"tbps", 8e12}};
  auto u = units.find(unit);
  if (end == t.c_str() || u == units.end() || !(x > 0) || !std::isfinite(x)) {
    throw Error(Status::InvalidArgument(what + ": rate '" + text +
                                        "' is not understood (examples: 1gbit, 500mbit, 100mbps, none)"));
  }
  return x * u->second;
}

namespace {

std::string Where(const std::string& source, const std::string& field) { return source + ": " + field; }

std::string KindName(Json::value_t type) {
  const std::string name = Json(type).type_name();  // "object", "array", "string", "number"...
  return (name == "object" || name == "array" ? "an " : "a ") + name;
}

// The member `key` of an object, checked to be of `type`; nullptr when absent or null.
const Json* Member(const Json& obj, const char* key, Json::value_t type, const std::string& where) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return nullptr;
  if (it->type() != type && !(type == Json::value_t::number_float && it->is_number())) {
    throw Error(Status::InvalidArgument(where + "." + key + " must be " + KindName(type) + ", not " +
                                        KindName(it->type())));
  }
  return &*it;
}

const Json* Find(const Json& obj, const char* key) {
  auto it = obj.find(key);
  return it == obj.end() ? nullptr : &*it;
}

double RateOf(const Json* v, double fallback, const std::string& where) {
  if (!v || v->is_null()) return fallback;
  if (v->is_number()) {
    if (!(v->get<double>() > 0)) throw Error(Status::InvalidArgument(where + ": a rate must be positive"));
    return v->get<double>();
  }
  if (v->is_string()) return ParseRateBps(v->get<std::string>(), where);
  throw Error(Status::InvalidArgument(where + ": a rate is a string like \"1gbit\" or a number of bits/s"));
}

PathClass PathOf(const Json& doc, const char* key, double default_rate, const std::string& source) {
  PathClass path;
  path.rate_bps = default_rate;
  const Json* v = Member(doc, key, Json::value_t::object, source);
  if (!v) return path;
  const std::string where = Where(source, key);
  if (const Json* link = Member(*v, "link", Json::value_t::string, where)) {
    const std::string k = link->get<std::string>();
    if (k == "switch") path.link = LinkKind::kSwitch;
    else if (k == "shared") path.link = LinkKind::kShared;
    else if (k == "direct") path.link = LinkKind::kDirect;
    else throw Error(Status::InvalidArgument(where + ".link '" + k + "' is not one of switch, shared, direct"));
  }
  path.rate_bps = RateOf(Find(*v, "rate"), default_rate, where + ".rate");
  return path;
}

}  // namespace

NetworkTopology NetworkTopology::FromJson(const Json& doc, const std::string& source) {
  if (!doc.is_object()) throw Error(Status::InvalidArgument(source + ": the topology must be a JSON object"));
  NetworkTopology t;
  t.source = source;
  const double default_rate = RateOf(Find(doc, "rate"), 1e9, Where(source, "rate"));
  auto group_index = [&t](const std::string& name) {
    auto it = std::find(t.group_names.begin(), t.group_names.end(), name);
    if (it != t.group_names.end()) return static_cast<int>(it - t.group_names.begin());
    t.group_names.push_back(name);
    return static_cast<int>(t.group_names.size()) - 1;
  };
  auto add_host = [&](const std::string& host, const std::string& group, double rate, const std::string& where) {
    if (host.empty()) throw Error(Status::InvalidArgument(where + ": a host name must not be empty"));
    if (t.group_of_host.count(host)) throw Error(Status::InvalidArgument(where + ": host '" + host + "' is named twice"));
    t.group_of_host[host] = group_index(group);
    t.host_rate_bps[host] = rate;
  };

  const Json* hosts = Find(doc, "hosts");
  const Json* groups = Member(doc, "groups", Json::value_t::object, source);
  if ((hosts && !hosts->is_null()) == (groups != nullptr)) {
    throw Error(Status::InvalidArgument(source + ": give either \"hosts\" (the simulated cluster's list) or "
                                                 "\"groups\" (group name -> host names), not " +
                                        std::string(groups ? "both" : "neither")));
  }
  if (hosts && hosts->is_number()) {  // the simulated cluster's shorthand: a count, no groups
    const double count = hosts->get<double>();
    if (!(count >= 1 && count <= 100000) || count != std::floor(count)) {
      throw Error(Status::InvalidArgument(Where(source, "hosts") + " must be a positive count or an array of hosts"));
    }
    for (int i = 0; i < static_cast<int>(count); ++i) {
      add_host("simhost" + std::to_string(i), "", default_rate, Where(source, "hosts"));
    }
  } else if (groups) {
    for (const auto& g : groups->items()) {
      const std::string where = Where(source, "groups." + g.key());
      if (!g.value().is_array()) throw Error(Status::InvalidArgument(where + " must be an array of host names"));
      for (const auto& h : g.value()) {
        if (!h.is_string()) throw Error(Status::InvalidArgument(where + " must be an array of host names"));
        add_host(h.get<std::string>(), g.key(), default_rate, where);
      }
    }
  } else {
    if (!hosts->is_array() || hosts->empty()) {
      throw Error(Status::InvalidArgument(Where(source, "hosts") + " must be a non-empty array of hosts"));
    }
    bool any_group = false, all_groups = true;
    for (size_t i = 0; i < hosts->size(); ++i) {
      const Json& h = (*hosts)[i];
      const std::string where = Where(source, "hosts[" + std::to_string(i) + "]");
      if (!h.is_object()) throw Error(Status::InvalidArgument(where + " must be an object"));
      const Json* name = Member(h, "name", Json::value_t::string, where);
      const Json* group = Member(h, "group", Json::value_t::string, where);
      any_group = any_group || group;
      all_groups = all_groups && group;
      // The simulated cluster names hosts simhost<i> unless told otherwise.
      add_host(name ? name->get<std::string>() : "simhost" + std::to_string(i), group ? group->get<std::string>() : "",
               RateOf(Find(h, "rate"), default_rate, where + ".rate"), where);
    }
    if (any_group && !all_groups) {
      throw Error(Status::InvalidArgument(Where(source, "hosts") + ": either every host has a \"group\" or none has"));
    }
  }
  if (t.group_of_host.empty()) throw Error(Status::InvalidArgument(source + ": the topology names no host"));
  t.intra = PathOf(doc, "intra", default_rate, source);
  t.cross = PathOf(doc, "cross", default_rate, source);
  return t;
}

NetworkTopology NetworkTopology::Load(const std::string& path) {
  return FromJson(ReadJsonFile(path), path);
}

int NetworkTopology::GroupOf(const std::string& host) const {
  auto it = group_of_host.find(host);
  return it == group_of_host.end() ? -1 : it->second;
}

// --- the plan -------------------------------------------------------------------------------

int HalvingDoublingPlan::rounds() const {
  int k = 0;
  while ((1 << k) < p) ++k;
  return k;
}

HalvingDoublingPlan HalvingDoublingPlan::FromOrder(std::vector<int> member_at) {
  HalvingDoublingPlan plan;
  plan.n = static_cast<int>(member_at.size());
  if (plan.n < 1) throw Error(Status::Internal("a halving-doubling plan needs at least one member"));
  plan.p = 1;
  while (plan.p * 2 <= plan.n) plan.p *= 2;
  plan.position_of.assign(plan.n, -1);
  for (int v = 0; v < plan.n; ++v) {
    int m = member_at[v];
    if (m < 0 || m >= plan.n || plan.position_of[m] != -1) {
      throw Error(Status::Internal("a halving-doubling plan must place every member exactly once"));
    }
    plan.position_of[m] = v;
  }
  plan.member_at = std::move(member_at);
  return plan;
}

HalvingDoublingPlan HalvingDoublingPlan::RankOrder(int n) {
  std::vector<int> order(n);
  for (int i = 0; i < n; ++i) order[i] = i;
  return FromOrder(std::move(order));
}

std::vector<std::vector<Flow>> AllreduceSteps(const HalvingDoublingPlan& plan, double bytes) {
  std::vector<std::vector<Flow>> steps;
  const int p = plan.p, r = plan.extras(), k = plan.rounds();
  const auto& at = plan.member_at;
  if (r > 0) {
    steps.emplace_back();
    for (int i = 0; i < r; ++i) steps.back().push_back({at[p + i], at[i], bytes});
  }
  auto round = [&](int j) {
    steps.emplace_back();
    const double part = bytes / static_cast<double>(2 << j);  // what each core position sends
    for (int v = 0; v < p; ++v) steps.back().push_back({at[v], at[v ^ (1 << j)], part});
  };
  for (int j = 0; j < k; ++j) round(j);       // reduce-scatter: halves, then quarters...
  for (int j = k - 1; j >= 0; --j) round(j);  // all-gather: the same exchanges in reverse
  if (r > 0) {
    steps.emplace_back();
    for (int i = 0; i < r; ++i) steps.back().push_back({at[i], at[p + i], bytes});
  }
  return steps;
}

// --- the link model -------------------------------------------------------------------------

LinkModel::LinkModel(const NetworkTopology& topology, std::vector<std::string> host_of_member,
                     const std::vector<int>& global_rank_of_member)
    : intra_(topology.intra), cross_(topology.cross), host_of_member_(std::move(host_of_member)) {
  std::vector<std::string> hosts;
  std::vector<int> group_index;  // topology group -> dense index among the members' groups
  for (size_t m = 0; m < host_of_member_.size(); ++m) {
    const std::string& h = host_of_member_[m];
    auto it = std::find(hosts.begin(), hosts.end(), h);
    if (it == hosts.end()) {
      int g = topology.GroupOf(h);
      if (g < 0) {
        int rank = m < global_rank_of_member.size() ? global_rank_of_member[m] : static_cast<int>(m);
        throw Error(Status::InvalidArgument(
            "HERRING_TOPOLOGY (" + topology.source + ") does not name host '" + h + "' of rank " +
            std::to_string(rank) + ": every host of the process set must be in a group"));
      }
      hosts.push_back(h);
      host_rate_.push_back(topology.host_rate_bps.at(h));
      if (static_cast<int>(group_index.size()) <= g) group_index.resize(g + 1, -1);
      if (group_index[g] < 0) group_index[g] = num_groups_++;
      group_of_host_.push_back(group_index[g]);
      it = hosts.end() - 1;
    }
    host_index_.push_back(static_cast<int>(it - hosts.begin()));
  }
  // Dense group numbers follow the topology's group order, not the members' first appearance.
  std::vector<int> order;
  for (size_t g = 0; g < group_index.size(); ++g) {
    if (group_index[g] >= 0) order.push_back(group_index[g]);
  }
  std::vector<int> renumber(num_groups_);
  for (int i = 0; i < num_groups_; ++i) renumber[order[i]] = i;
  for (int& g : group_of_host_) g = renumber[g];
  BuildRoutes();
}

void LinkModel::BuildRoutes() {
  const int H = static_cast<int>(host_rate_.size()), G = num_groups_;
  // Link ids: host h's link out (h) and in (H + h); group g's shared link (2H + g), uplink
  // (2H + G + g) and downlink (2H + 2G + g); the direct link a -> b (2H + 3G + a*H + b).
  link_rate_.assign(2 * H + 3 * G + H * H, 0);
  routes_.assign(H * H, {});
  for (int a = 0; a < H; ++a) {
    for (int b = 0; b < H; ++b) {
      if (a == b) continue;  // the same host: loopback, no network link
      const int ga = group_of_host_[a], gb = group_of_host_[b];
      const PathClass& path = ga == gb ? intra_ : cross_;
      std::vector<int>& route = routes_[a * H + b];
      auto use = [&](int link, double rate) {
        if (rate <= 0) return;  // not constrained
        link_rate_[link] = rate;
        route.push_back(link);
      };
      if (path.link == LinkKind::kDirect) {
        use(2 * H + 3 * G + a * H + b, path.rate_bps);  // its own link: bypasses the host links
        continue;
      }
      use(a, host_rate_[a]);
      if (path.link == LinkKind::kShared) {
        if (ga == gb) {
          use(2 * H + ga, path.rate_bps);  // one link for both directions
        } else {
          use(2 * H + G + ga, path.rate_bps);
          use(2 * H + 2 * G + gb, path.rate_bps);
        }
      }
      use(H + b, host_rate_[b]);
    }
  }
}

LinkModel::StepLoad LinkModel::Load(const std::vector<Flow>& step) const {
  const int H = static_cast<int>(host_rate_.size());
  if (seconds_.size() != link_rate_.size()) {
    seconds_.assign(link_rate_.size(), 0);
    flows_.assign(link_rate_.size(), 0);
  }
  for (const Flow& f : step) {
    for (int link : routes_[host_index_[f.src] * H + host_index_[f.dst]]) {
      if (flows_[link] == 0) touched_.push_back(link);
      seconds_[link] += f.bytes * 8 / link_rate_[link];
      flows_[link] += 1;
    }
  }
  StepLoad out;
  for (int link : touched_) {  // read the busiest link, then leave the scratch zeroed
    out.seconds = std::max(out.seconds, seconds_[link]);
    out.most_flows = std::max(out.most_flows, flows_[link]);
    seconds_[link] = 0;
    flows_[link] = 0;
  }
  touched_.clear();
  return out;
}

double LinkModel::StepSeconds(const std::vector<Flow>& step) const { return Load(step).seconds; }

double LinkModel::AllreduceSeconds(const HalvingDoublingPlan& plan, double bytes) const {
  double total = 0;
  for (const auto& step : AllreduceSteps(plan, bytes)) total += StepSeconds(step);
  return total;
}

std::vector<int> LinkModel::MostFlowsPerLink(const HalvingDoublingPlan& plan) const {
  std::vector<int> out;
  for (const auto& step : AllreduceSteps(plan, 1.0)) out.push_back(Load(step).most_flows);
  return out;
}

// --- the search -----------------------------------------------------------------------------

namespace {

// Pairwise swaps cost O(n^2) model evaluations per pass; beyond this many members only the
// starting mappings are compared.
constexpr int kMaxSearchMembers = 64;
constexpr int kMaxPasses = 16;
// A swap must improve the model by more than rounding noise to count.
constexpr double kImprovement = 1e-9;

int Popcount(int v) {
  int c = 0;
  for (; v; v &= v - 1) ++c;
  return c;
}

// The two groups' members fill the even- and odd-parity core positions; what does not fit
// becomes an extra position, paired (when possible) with a core position of the other group so
// that the fold and the unfold cross between the parts too.
std::vector<int> BiGraphOrder(const LinkModel& model, int p, int even_group) {
  const int n = model.members();
  std::vector<int> in_group[2];
  // in_group[0]: the group that takes the even-parity positions.
  for (int m = 0; m < n; ++m) in_group[model.group_of_member(m) == even_group ? 0 : 1].push_back(m);
  const int half = p / 2;
  int core[2];
  core[0] = std::min<int>(static_cast<int>(in_group[0].size()), std::max(half, p - static_cast<int>(in_group[1].size())));
  core[1] = p - core[0];
  // Core members: spread over the group's hosts (members are in rank order, which keeps each
  // host's ranks together; taking every other one first keeps hosts from being all-extra).
  std::vector<int> chosen[2], extra[2];
  for (int g = 0; g < 2; ++g) {
    std::vector<int>& all = in_group[g];
    std::vector<int> preference;
    for (size_t i = 0; i < all.size(); i += 2) preference.push_back(all[i]);
    for (size_t i = 1; i < all.size(); i += 2) preference.push_back(all[i]);
    for (size_t i = 0; i < preference.size(); ++i) {
      (static_cast<int>(i) < core[g] ? chosen[g] : extra[g]).push_back(preference[i]);
    }
    std::sort(chosen[g].begin(), chosen[g].end());
    std::sort(extra[g].begin(), extra[g].end());
  }
  std::vector<int> order(n, -1);
  size_t next[2] = {0, 0};
  for (int v = 0; v < p; ++v) {  // parity 0 -> group 0, parity 1 -> group 1, overflow either way
    int g = Popcount(v) & 1;
    if (next[g] >= chosen[g].size()) g ^= 1;
    order[v] = chosen[g][next[g]++];
  }
  size_t used[2] = {0, 0};
  for (int i = 0; i < n - p; ++i) {  // extra position p + i folds into core position i
    int want = model.group_of_member(order[i]) == even_group ? 1 : 0;
    if (used[want] >= extra[want].size()) want ^= 1;
    order[p + i] = extra[want][used[want]++];
  }
  return order;
}

std::vector<int> GroupContiguousOrder(const LinkModel& model) {
  std::vector<int> order(model.members());
  for (int m = 0; m < model.members(); ++m) order[m] = m;
  std::stable_sort(order.begin(), order.end(),
                   [&](int a, int b) { return model.group_of_member(a) < model.group_of_member(b); });
  return order;
}

double Cost(const LinkModel& model, const std::vector<int>& order) {
  return model.AllreduceSeconds(HalvingDoublingPlan::FromOrder(order), 1.0);
}

// Swaps two positions while that lowers the modeled time (first improvement, in a fixed order,
// so every rank walks the same path). Returns the number of swaps made.
int Improve(const LinkModel& model, std::vector<int>* order, double* cost) {
  const int n = static_cast<int>(order->size());
  int swaps = 0;
  if (n > kMaxSearchMembers) return swaps;
  for (int pass = 0; pass < kMaxPasses; ++pass) {
    bool improved = false;
    for (int i = 0; i < n; ++i) {
      for (int j = i + 1; j < n; ++j) {
        if (model.host_index((*order)[i]) == model.host_index((*order)[j])) continue;  // no change
        std::swap((*order)[i], (*order)[j]);
        double c = Cost(model, *order);
        if (c < *cost * (1 - kImprovement)) {
          *cost = c;
          improved = true;
          ++swaps;
        } else {
          std::swap((*order)[i], (*order)[j]);
        }
      }
    }
    if (!improved) break;
  }
  return swaps;
}

}  // namespace

TopologyMapping MapOntoTopology(const LinkModel& model) {
  const int n = model.members();
  const HalvingDoublingPlan rank_order = HalvingDoublingPlan::RankOrder(n);
  std::vector<std::pair<std::string, std::vector<int>>> starts = {{"rank order", rank_order.member_at}};
  if (model.num_groups() == 2 && rank_order.p >= 2) {
    // Either group may take the even positions: with extras the two differ in where they fold.
    starts.push_back({"bigraph", BiGraphOrder(model, rank_order.p, 0)});
    starts.push_back({"bigraph", BiGraphOrder(model, rank_order.p, 1)});
  }
  if (model.num_groups() >= 2) starts.push_back({"group-contiguous", GroupContiguousOrder(model)});

  TopologyMapping best;
  best.rank_order_seconds_per_byte = Cost(model, rank_order.member_at);
  double best_cost = 0;
  bool have = false;
  for (auto& start : starts) {
    double cost = Cost(model, start.second);
    int swaps = Improve(model, &start.second, &cost);
    // Ties go to the start that needed fewer swaps, then to the earlier start (rank order when
    // the topology does not matter).
    const bool tie = have && !(cost < best_cost * (1 - kImprovement)) && !(best_cost < cost * (1 - kImprovement));
    if (!have || cost < best_cost * (1 - kImprovement) || (tie && swaps < best.swaps)) {
      best.plan = HalvingDoublingPlan::FromOrder(start.second);
      best.strategy = start.first;
      best.swaps = swaps;
      best_cost = cost;
      have = true;
    }
  }
  best.modeled_seconds_per_byte = best_cost;
  return best;
}

std::string DescribeMapping(const TopologyMapping& mapping, const LinkModel& model) {
  std::ostringstream s;
  const auto& plan = mapping.plan;
  s << mapping.strategy << " mapping";
  if (mapping.swaps) s << " (+" << mapping.swaps << " swaps)";
  s << " of " << plan.n << " members (" << plan.p << " core positions";
  if (plan.extras()) s << ", " << plan.extras() << " folded in";
  s << "): position->member[host/group]";
  for (int v = 0; v < plan.n; ++v) {
    int m = plan.member_at[v];
    s << (v ? ", " : " ") << v << "->" << m << "[" << model.host_of_member(m) << "/" << model.group_of_member(m) << "]";
  }
  std::vector<int> most = model.MostFlowsPerLink(plan);
  s << "; most flows on one link per step:";
  for (int f : most) s << " " << f;
  if (mapping.modeled_seconds_per_byte > 0) {
    s << "; modeled " << mapping.rank_order_seconds_per_byte / mapping.modeled_seconds_per_byte
      << "x faster than rank order";
  }
  return s.str();
}

}  // namespace herring
