// Names the engine's threads, so that `top -H`, `ps -L`, gdb and py-spy tell them from the
// application's (otherwise every thread of the process shows as "python").
#pragma once

#include <pthread.h>

#include <thread>

namespace herring {

// Named by the thread that started it, so the name is there as soon as the constructor returns
// (a new thread may not run for a while on a busy machine). `name`: at most 15 characters (the
// kernel's limit); a longer one is left unset, not cut.
inline void NameThread(std::thread& thread, const char* name) { pthread_setname_np(thread.native_handle(), name); }

}  // namespace herring
