// Fuzz target: the package spec, as a package's metadata carries it, and preflight.
// The input is JSON text: an object of strings is a package's metadata (the spec
// document under "aoti_deploy.spec", or the legacy "aoti_deploy.*" entries), anything
// else is a spec document. A spec that parses must survive a round trip through the
// writer (spec_to_document) with the same meaning, then preflight on a fixed host.
#include "fuzz_input.h"
#include "json_text.h"
#include "package_spec.h"
#include "preflight.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>

namespace {

using namespace aoti_runner;

bool all_strings(const nlohmann::json& document) {
  if (!document.is_object()) {
    return false;
  }
  for (const auto& [key, value] : document.items()) {
    if (!value.is_string()) {
      return false;
    }
  }
  return true;
}

HostFacts fixed_host() {
  HostFacts host;
  host.torch_version = "2.13.0+cpu";
  host.machine = "x86_64";
  host.cpu_flags = {"sse4_2", "avx", "avx2", "fma", "avx512f"};
  host.has_op = [](const OpRef& op) { return op.name.rfind("my_ops::", 0) == 0; };
  host.has_class = [](const std::string& name) { return name == "my_ops::IdentityConvClass"; };
  return host;
}

void check_round_trip(const PackageSpec& spec) {
  const auto document = spec_to_document(spec);
  PackageSpec again;
  try {
    again = parse_spec_document(nlohmann::json::parse(document.dump()));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "the writer's document of a valid spec does not parse: %s\n%s\n", e.what(),
                 document.dump().c_str());
    std::abort();
  }
  again.aoti = spec.aoti;  // AOTI's own metadata entries are not part of the document
  // The writer records the lowest version that holds the spec, whatever it was read from.
  if (again.schema_version > std::max(spec.schema_version, 2)) {
    std::fprintf(stderr, "a spec read as schema %d was written as %d\n", spec.schema_version, again.schema_version);
    std::abort();
  }
  again.schema_version = spec.schema_version;
  auto rows = describe_package(spec);
  auto rows_again = describe_package(again);
  if (rows != rows_again || spec_to_document(again) != document) {
    std::fprintf(stderr, "the spec changed through the writer and the parser:\n%s\n%s\n", document.dump().c_str(),
                 spec_to_document(again).dump().c_str());
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const HostFacts host = fixed_host();
  nlohmann::json document;
  try {
    document = parse_json_limited(std::string(reinterpret_cast<const char*>(data), size));
  } catch (const JsonTextError&) {
    return 0;
  }
  aoti_fuzz::expect_verdict("the spec reader", [&] {
    PackageSpec spec;
    if (all_strings(document)) {
      spec = spec_from_metadata(document.get<std::map<std::string, std::string>>(), "fuzz.pt2");
    } else {
      spec = parse_spec_document(document);
    }
    check_round_trip(spec);
    for (const auto& input : spec.inputs) {
      format_shape(input);
    }
    aoti_fuzz::expect_verdict("preflight", [&] { check_runs_here(spec, host); });
    aoti_fuzz::expect_verdict("the symbol check", [&] { check_required_symbols(spec, host); });
  });
  return 0;
}
