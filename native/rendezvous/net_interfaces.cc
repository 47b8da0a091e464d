#include "rendezvous/net_interfaces.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <memory>
#include <vector>

#include "common/status.h"

namespace herring {

namespace {

struct IfaddrsDeleter {
  void operator()(ifaddrs* list) const { freeifaddrs(list); }
};

// Interface name -> its IPv4 addresses in the kernel's order (empty for IPv6-only or down
// interfaces that still show up).
std::map<std::string, std::vector<std::string>> ListInterfaces() {
  ifaddrs* raw = nullptr;
  if (getifaddrs(&raw) != 0) {
    throw Error(Status::Internal(std::string("getifaddrs() failed: ") + std::strerror(errno)));
  }
  std::unique_ptr<ifaddrs, IfaddrsDeleter> list(raw);
  std::map<std::string, std::vector<std::string>> interfaces;
  for (ifaddrs* it = list.get(); it != nullptr; it = it->ifa_next) {
    if (it->ifa_name == nullptr) continue;
    auto& addresses = interfaces[it->ifa_name];
    if (it->ifa_addr == nullptr || it->ifa_addr->sa_family != AF_INET) continue;
    char text[INET_ADDRSTRLEN] = {};
    const auto* sin = reinterpret_cast<const sockaddr_in*>(it->ifa_addr);
    if (inet_ntop(AF_INET, &sin->sin_addr, text, sizeof(text)) != nullptr) {
      addresses.push_back(text);
    }
  }
  return interfaces;
}

std::string Describe(const std::map<std::string, std::vector<std::string>>& interfaces) {
  std::string out;
  for (const auto& [name, addresses] : interfaces) {
    if (!out.empty()) out += ", ";
    out += name + " (" + (addresses.empty() ? std::string("no IPv4") : addresses.front()) + ")";
  }
  return out.empty() ? std::string("none") : out;
}

}  // namespace

std::string InterfaceAddress(const std::string& iface) {
  auto interfaces = ListInterfaces();
  auto it = interfaces.find(iface);
  if (it != interfaces.end() && !it->second.empty()) return it->second.front();
  std::string problem = it == interfaces.end() ? "does not exist" : "has no IPv4 address";
  throw Error(Status::InvalidArgument("network interface '" + iface + "' " + problem +
                                      "; interfaces on this host: " + Describe(interfaces) +
                                      " (choose one with HOROVOD_GLOO_IFACE or HERRING_IFACE)"));
}

}  // namespace herring
