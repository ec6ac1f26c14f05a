// The one lock around torch's unguarded AOTI globals. torch's package loader parses
// every JSON file of a package (the model's metadata, and the compile and link flags
// when it compiles one) into a single function-local static nlohmann::json, with no
// lock: two loaders built, or two packages' metadata read, on two threads at once
// corrupt the heap. Every call of AOTIModelPackageLoader's constructor and of its
// load_metadata_from_package in this project is made while holding this lock.
#pragma once

#include <mutex>

namespace aoti_runner {

// Held for the whole of one such call; not reentrant (never call it twice on a thread).
std::unique_lock<std::mutex> lock_torch_globals();

}  // namespace aoti_runner
