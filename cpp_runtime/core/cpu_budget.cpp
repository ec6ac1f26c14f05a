#include "cpu_budget.h"

#include <sched.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>

namespace aoti_runner {
namespace {

// A quota in CPUs from "quota period" numbers; nullopt for none ("max", -1, unreadable).
std::optional<double> quota_cpus(const std::string& quota, const std::string& period) {
  try {
    const double q = std::stod(quota);
    const double p = std::stod(period);
    if (q > 0 && p > 0) {
      return q / p;
    }
  } catch (const std::exception&) {
  }
  return std::nullopt;
}

}  // namespace

std::optional<double> cgroup_quota_cpus(const std::string& membership_text, const std::string& root) {
  std::optional<double> tightest;
  const auto keep = [&](std::optional<double> cpus) {
    if (cpus && (!tightest || *cpus < *tightest)) {
      tightest = cpus;
    }
  };
  std::istringstream membership(membership_text);
  std::string line;
  while (std::getline(membership, line)) {
    // "0::/path" (v2) or "N:cpu,cpuacct:/path" (v1).
    const auto first = line.find(':');
    const auto second = line.find(':', first + 1);
    if (first == std::string::npos || second == std::string::npos) {
      continue;
    }
    const auto controllers = line.substr(first + 1, second - first - 1);
    std::string path = line.substr(second + 1);
    const bool v2 = controllers.empty();
    std::stringstream list(controllers);
    std::string controller;
    bool v1_cpu = false;
    while (std::getline(list, controller, ',')) {
      v1_cpu = v1_cpu || controller == "cpu";
    }
    if (!v2 && !v1_cpu) {
      continue;
    }
    for (;;) {
      if (v2) {
        std::ifstream file(root + path + "/cpu.max");
        std::string quota, period;
        if (file >> quota >> period) {
          keep(quota_cpus(quota, period));
        }
      } else {
        std::ifstream quota_file(root + "/cpu" + path + "/cpu.cfs_quota_us");
        std::ifstream period_file(root + "/cpu" + path + "/cpu.cfs_period_us");
        std::string quota, period;
        if (quota_file >> quota && period_file >> period) {
          keep(quota_cpus(quota, period));
        }
      }
      if (path.empty() || path == "/") {
        break;
      }
      const auto slash = path.rfind('/');
      path = slash == 0 || slash == std::string::npos ? "/" : path.substr(0, slash);
    }
  }
  return tightest;
}

int usable_cpus(int affinity, std::optional<double> quota) {
  int cpus = std::max(1, affinity);
  if (quota) {
    cpus = std::min(cpus, std::max(1, static_cast<int>(std::ceil(*quota))));
  }
  return cpus;
}

int usable_cpus() {
  int affinity = 0;
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (sched_getaffinity(0, sizeof(allowed), &allowed) == 0) {
    affinity = CPU_COUNT(&allowed);
  }
  std::ifstream file("/proc/self/cgroup");
  std::stringstream membership;
  membership << file.rdbuf();
  return usable_cpus(affinity, cgroup_quota_cpus(membership.str(), "/sys/fs/cgroup"));
}

int intra_op_threads_for(int cpus, int64_t serving_threads, int reserved) {
  const int64_t left = std::max<int64_t>(1, static_cast<int64_t>(cpus) - std::max(0, reserved));
  return static_cast<int>(std::max<int64_t>(1, left / std::max<int64_t>(1, serving_threads)));
}

std::string thread_count_note(int64_t compiled, int running) {
  if (compiled <= 0 || running <= 0 || compiled == running) {
    return "";
  }
  const auto n = std::to_string(compiled);
  const auto m = std::to_string(running);
  return "this package was compiled for " + n + " intra-op thread(s) and runs at " + m +
         ": oneDNN laid any convolution weights it holds out for " + n + ", and may lay some out again on every "
         "call at another count (a ResNet-50 ran 2.3x slower); its outputs may differ in bits from runs at " + n +
         ". To run at " + m + ", export with --threads " + m + " (threads=" + m + ").";
}

}  // namespace aoti_runner
