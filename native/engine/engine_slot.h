// EngineSlot: how native code that Python does not call directly (the TensorFlow kernels, which
// run on TensorFlow's threads) finds the engine of the Python front that built it, without any
// process-wide slot in the core.
//
// The Python front (hvd_herring.basics.HerringBasics) owns one EngineSlot for its whole life and
// puts into it the engine it runs: Set at hvd.init(), ClearIf after hvd.shutdown(). The engine
// changes (an elastic reset shuts one down and creates the next), the slot does not. Every
// herring TF op carries a reference to the slot in two attributes (native/tensorflow/op_attrs.h):
//   engine_slot   the slot's address in the process that built the op
//   engine_owner  that process's identity (ProcessIdentity(), common/pid_namespace.h)
// A kernel takes a reference to the slot when TensorFlow constructs it (weak_from_this: the slot
// then lives as long as the kernel, even past the front), and reads the engine from it each time
// it runs. So:
//   - torch and TensorFlow in one process share the front, hence the slot and the one engine;
//   - a tf.function traced before an elastic reset still names the same slot, and its kernels use
//     the engine of the new round;
//   - a kernel that finds the slot empty (before init, after shutdown) reports Horovod's
//     "not initialized" error, as does a kernel whose op was built by another process (a
//     serialized graph: engine_owner differs, the address is never read) or without a slot;
//   - a kernel holds the engine (a shared_ptr) while it enqueues, so a shutdown meanwhile cannot
//     free it; a request the engine accepted is failed by Shutdown, never dropped.
// A raw address in an attribute is safe because it is only followed in the process that wrote it
// (engine_owner matches), where the slot is alive: the front holds it until it is destroyed
// itself, and kernels built before that hold their own reference.
#pragma once

#include <memory>
#include <mutex>
#include <utility>

#include "engine/engine.h"

namespace herring {

class EngineSlot : public std::enable_shared_from_this<EngineSlot> {
 public:
  // The engine in the slot, or null. Any thread.
  std::shared_ptr<Engine> Get() const {
    std::lock_guard<std::mutex> lock(mu_);
    return engine_;
  }

  void Set(std::shared_ptr<Engine> engine) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      std::swap(engine_, engine);
    }
    // `engine` now holds the previous one, released here, outside the lock.
  }

  // Empties the slot if it still holds `engine` (a newer engine put in meanwhile stays).
  void ClearIf(const Engine* engine) {
    std::shared_ptr<Engine> previous;
    std::lock_guard<std::mutex> lock(mu_);
    if (engine_.get() == engine) std::swap(engine_, previous);
  }

 private:
  mutable std::mutex mu_;
  std::shared_ptr<Engine> engine_;
};

}  // namespace herring
