// Counters the engine exposes to Python (hvd_herring.counters()): how many cycles ran, how many
// needed the coordinator, how often the response cache answered... Tests use them to prove that
// steady-state steps negotiate with one bit-vector AND and no coordinator round.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <string>

namespace herring {

struct Counters {
  std::atomic<uint64_t> cycles{0};               // negotiation cycles (one bit-vector AND each)
  std::atomic<uint64_t> coordinator_rounds{0};   // cycles that also gathered requests on rank 0
  std::atomic<uint64_t> cache_hits{0};           // requests matched to a cached response
  std::atomic<uint64_t> cache_misses{0};         // requests sent to the coordinator
  std::atomic<uint64_t> cache_stale{0};          // cached, but shape/dtype/op changed
  std::atomic<uint64_t> responses{0};            // collectives executed (a group counts once)
  std::atomic<uint64_t> fused_buffers{0};        // allreduce executions after fusion
  std::atomic<uint64_t> allreduce_bytes{0};      // bytes of fused allreduce buffers
  std::atomic<uint64_t> herring_allreduces{0};   // executions by the PS allreduce
  std::atomic<uint64_t> ring_allreduces{0};      // executions by the ring allreduce
  std::atomic<uint64_t> hd_allreduces{0};        // executions by halving-doubling (hd, hd-topo)
  std::atomic<uint64_t> adasum_allreduces{0};    // executions of op=Adasum (ops/adasum_allreduce.h)
  std::atomic<uint64_t> shm_chunks{0};           // chunks staged through shared memory
  std::atomic<uint64_t> shm_negotiations{0};     // cycles whose AND met in shared memory
  std::atomic<uint64_t> one_step_allreduces{0};  // small batches reduced by every rank in one step
  std::atomic<uint64_t> inputs_with_bits{0};     // of those, whose inputs came with the bit vectors
  std::atomic<uint64_t> host_sum_exchanges{0};   // small batches across hosts: host sums sent host to host
  std::atomic<uint64_t> totals_with_bits{0};     // of those, whose total came with the cycle's result
  std::atomic<uint64_t> one_step_allgathers{0};  // small allgathers through shared memory in one step
  std::atomic<uint64_t> one_step_broadcasts{0};  // small broadcasts through shared memory in one step
  std::atomic<uint64_t> idle_starts{0};          // cycles this rank started at once on a lone request
  std::atomic<uint64_t> waiter_cycles{0};        // cycles run by a thread waiting on its request
  std::atomic<uint64_t> cpu_moves{0};            // cycle threads moved off a CPU another local rank was on
  std::atomic<uint64_t> empty_joins{0};          // peers' cycles joined with nothing of this rank's
  std::atomic<uint64_t> wasted_empty_joins{0};   // of those, cycles that decided nothing
  std::atomic<uint64_t> zero_copy_allreduces{0}; // batches reduced in place in zero-copy memory
  std::atomic<uint64_t> peer_output_reads{0};    // slices of a sum copied out of another local rank's tensors
  std::atomic<uint64_t> cross_memory_allreduces{0};  // batches reduced in place through cross-memory copies
  std::atomic<uint64_t> server_ranges{0};        // byte ranges reduced by this rank's server shards
  std::atomic<uint64_t> server_pushes{0};        // pieces this rank pushed to server shards
  std::atomic<uint64_t> stall_warnings{0};       // stall reports logged (rank 0)
  std::atomic<uint64_t> partition_map_version{0};  // of the global set's shards (PSLD moves it)
  std::atomic<uint64_t> membership_changes{0};   // dedicated servers that joined or left
  // HOROVOD_AUTOTUNE: the settings in force (versions put in force, the cycle of the last switch).
  std::atomic<uint64_t> autotune_active{0};
  std::atomic<uint64_t> autotune_version{0};
  std::atomic<uint64_t> autotune_applied_cycle{0};
  std::atomic<uint64_t> tuned_fusion_threshold_bytes{0};
  std::atomic<uint64_t> tuned_cycle_time_us{0};
  std::atomic<uint64_t> tuned_small_message_bytes{0};
  std::atomic<uint64_t> tuned_allreduce{0};  // an AllreduceAlgorithm: 0 herring, 1 ring, 2 hd, 3 hd-topo
  std::atomic<uint64_t> tuned_tcp_streams{0};  // TCP data streams a message is striped over
  // Negotiation messages (bit vectors, invitations, results, uncached requests, responses) this
  // rank sent and received over TCP: the star's rank 0 handles O(ranks) per cycle, the
  // hierarchical plane's busiest leader O(log hosts).
  std::atomic<uint64_t> control_messages_sent{0};
  std::atomic<uint64_t> control_messages_received{0};

  std::map<std::string, uint64_t> Snapshot() const {
    return {{"cycles", cycles},
            {"coordinator_rounds", coordinator_rounds},
            {"cache_hits", cache_hits},
            {"cache_misses", cache_misses},
            {"cache_stale", cache_stale},
            {"responses", responses},
            {"fused_buffers", fused_buffers},
            {"allreduce_bytes", allreduce_bytes},
            {"herring_allreduces", herring_allreduces},
            {"ring_allreduces", ring_allreduces},
            {"hd_allreduces", hd_allreduces},
            {"adasum_allreduces", adasum_allreduces},
            {"shm_chunks", shm_chunks},
            {"shm_negotiations", shm_negotiations},
            {"one_step_allreduces", one_step_allreduces},
            {"inputs_with_bits", inputs_with_bits},
            {"host_sum_exchanges", host_sum_exchanges},
            {"totals_with_bits", totals_with_bits},
            {"one_step_allgathers", one_step_allgathers},
            {"one_step_broadcasts", one_step_broadcasts},
            {"idle_starts", idle_starts},
            {"waiter_cycles", waiter_cycles},
            {"cpu_moves", cpu_moves},
            {"empty_joins", empty_joins},
            {"wasted_empty_joins", wasted_empty_joins},
            {"zero_copy_allreduces", zero_copy_allreduces},
            {"peer_output_reads", peer_output_reads},
            {"cross_memory_allreduces", cross_memory_allreduces},
            {"server_ranges", server_ranges},
            {"server_pushes", server_pushes},
            {"stall_warnings", stall_warnings},
            {"partition_map_version", partition_map_version},
            {"membership_changes", membership_changes},
            {"autotune_active", autotune_active},
            {"autotune_version", autotune_version},
            {"autotune_applied_cycle", autotune_applied_cycle},
            {"tuned_fusion_threshold_bytes", tuned_fusion_threshold_bytes},
            {"tuned_cycle_time_us", tuned_cycle_time_us},
            {"tuned_small_message_bytes", tuned_small_message_bytes},
            {"tuned_allreduce", tuned_allreduce},
            {"tuned_tcp_streams", tuned_tcp_streams},
            {"control_messages_sent", control_messages_sent},
            {"control_messages_received", control_messages_received}};
  }
};

}  // namespace herring
