// Note [cluster certificates]: the files `actorpipe certs` makes pass the checks mutual TLS runs before it
// starts (the key is its certificate's, the CA signed it), a second run reuses the CA so new machines join the
// cluster, another folder's CA does not vouch for them, keys are the owner's only, and bad names are refused.
#include <doctest/doctest.h>

#include <sys/stat.h>

#include <filesystem>
#include <string>

#include "network/certificates.hpp"
#include "network/transport_security.hpp"
#include "test_support.hpp"

using namespace ap;

namespace {

transport_security files(const std::string& dir, const std::string& name, const std::string& ca_dir = "") {
  transport_security s;
  s.ca_file = (ca_dir.empty() ? dir : ca_dir) + "/ca.pem";
  s.certificate_file = dir + "/" + name + ".pem";
  s.key_file = dir + "/" + name + ".key";
  return s;
}

}  // namespace

TEST_CASE("certificates made here pass mutual TLS's checks, a second run joins the same CA, another CA refuses") {
  test::scratch_dir scratch{"certificates"};
  const std::string dir = scratch.file("cluster"), other = scratch.file("other");
  const made_certificates made = make_certificates(dir, {"coordinator", "node1", "10.0.0.7"}, 30);
  CHECK_FALSE(made.reused_ca);
  CHECK(made.names == std::vector<std::string>{"coordinator", "node1", "10.0.0.7"});
  for (const std::string name : {"coordinator", "node1", "10.0.0.7"}) {
    INFO(name);
    CHECK_NOTHROW(check_transport_security(files(dir, name), "test"));
    struct stat key {};
    REQUIRE(stat((dir + "/" + name + ".key").c_str(), &key) == 0);
    CHECK((key.st_mode & 0777) == 0600);
  }
  const made_certificates later = make_certificates(dir, {"node2"});
  CHECK(later.reused_ca);
  CHECK_NOTHROW(check_transport_security(files(dir, "node2"), "test"));
  CHECK_NOTHROW(check_transport_security(files(dir, "node1"), "test"));  // the CA is the same one

  make_certificates(other, {"intruder"});
  const std::string refused = test::error_of([&] { check_transport_security(files(other, "intruder", dir), "test"); });
  CHECK(test::contains(refused, "--tls-cert"));
  CHECK(test::contains(test::error_of([&] { make_certificates(dir, {"../escape"}); }), "cannot name a certificate"));
  CHECK(test::contains(test::error_of([&] { make_certificates(dir, {"ca"}); }), "cannot name a certificate"));
  CHECK(test::contains(test::error_of([&] { make_certificates(dir, {"a"}, 0); }), "--days must be 1..36500"));
}
