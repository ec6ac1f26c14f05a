#include "digest.h"

#include "errors.h"

#include <openssl/evp.h>

#include <condition_variable>
#include <fstream>
#include <mutex>
#include <thread>
#include <vector>

namespace aoti_runner {

struct Sha256::State {
  EVP_MD_CTX* context = nullptr;
};

Sha256::Sha256() : state_(std::make_unique<State>()) {
  state_->context = EVP_MD_CTX_new();
  if (state_->context == nullptr || EVP_DigestInit_ex(state_->context, EVP_sha256(), nullptr) != 1) {
    EVP_MD_CTX_free(state_->context);
    throw RunnerError("OpenSSL could not start a SHA-256 digest");
  }
}

Sha256::~Sha256() {
  EVP_MD_CTX_free(state_->context);
}

void Sha256::update(const void* data, size_t size) {
  if (EVP_DigestUpdate(state_->context, data, size) != 1) {
    throw RunnerError("OpenSSL failed while computing a SHA-256 digest");
  }
}

std::string Sha256::finish() {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int size = 0;
  if (EVP_DigestFinal_ex(state_->context, digest, &size) != 1) {
    throw RunnerError("OpenSSL failed while finishing a SHA-256 digest");
  }
  return std::string(reinterpret_cast<const char*>(digest), size);
}

struct Sha256Thread::Shared {
  Sha256 hasher;
  std::mutex mutex;
  std::condition_variable changed;
  const void* data = nullptr;  // the block in hand, while `busy`
  size_t size = 0;
  bool busy = false;
  bool stopping = false;
  std::thread worker;  // last: started once the rest exists

  void run() {
    std::unique_lock<std::mutex> lock(mutex);
    while (true) {
      changed.wait(lock, [&] { return busy || stopping; });
      if (!busy) {
        return;
      }
      lock.unlock();
      hasher.update(data, size);  // OpenSSL's update does not throw
      lock.lock();
      busy = false;
      changed.notify_all();
    }
  }
  void wait_idle(std::unique_lock<std::mutex>& lock) {
    changed.wait(lock, [&] { return !busy; });
  }
};

Sha256Thread::Sha256Thread() : shared_(std::make_unique<Shared>()) {
  shared_->worker = std::thread([state = shared_.get()] { state->run(); });
}

Sha256Thread::~Sha256Thread() {
  {
    std::unique_lock<std::mutex> lock(shared_->mutex);
    shared_->wait_idle(lock);
    shared_->stopping = true;
    shared_->changed.notify_all();
  }
  if (shared_->worker.joinable()) {
    shared_->worker.join();
  }
}

void Sha256Thread::update(const void* data, size_t size) {
  std::unique_lock<std::mutex> lock(shared_->mutex);
  shared_->wait_idle(lock);
  shared_->data = data;
  shared_->size = size;
  shared_->busy = true;
  shared_->changed.notify_all();
}

std::string Sha256Thread::finish() {
  std::unique_lock<std::mutex> lock(shared_->mutex);
  shared_->wait_idle(lock);
  return shared_->hasher.finish();
}

std::string sha256(const std::string& data) {
  Sha256 hasher;
  hasher.update(data.data(), data.size());
  return hasher.finish();
}

std::string to_hex(const std::string& bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string hex;
  hex.reserve(bytes.size() * 2);
  for (const unsigned char byte : bytes) {
    hex.push_back(kDigits[byte >> 4]);
    hex.push_back(kDigits[byte & 0xf]);
  }
  return hex;
}

std::string sha256_file(const std::string& path, const std::string& what) {
  std::ifstream file(path, std::ios::binary);
  if (!file) {
    throw RunnerError("could not read " + what + " " + path + ".");
  }
  Sha256 hasher;
  std::vector<char> buffer(1 << 20);
  while (file) {
    file.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
    hasher.update(buffer.data(), static_cast<size_t>(file.gcount()));
  }
  if (file.bad()) {
    throw RunnerError("reading " + what + " " + path + " failed while hashing it.");
  }
  return hasher.finish();
}

}  // namespace aoti_runner
