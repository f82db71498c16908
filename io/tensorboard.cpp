#include "io/tensorboard.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <nlohmann/json.hpp>

#include "core/error.h"

#if HZ_TENSORBOARD
#include <isa-l/crc.h>

#include "io/tensorboard.pb.h"
#endif

namespace hz::io {

#if HZ_TENSORBOARD
bool tensorboard_available() { return true; }

uint32_t masked_crc32c(const void* data, size_t n) {
  // ISA-L's crc32_iscsi(buf, len, init) leaves out the final inversion: CRC32C = ~crc32_iscsi(.., ~0)
  uint32_t c = 0xffffffffu;
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t done = 0; done < n;) {  // its length is an int
    const int len = static_cast<int>(std::min<size_t>(n - done, 1u << 30));
    c = crc32_iscsi(const_cast<unsigned char*>(p + done), len, c);
    done += static_cast<size_t>(len);
  }
  c = ~c;
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

namespace tb = horizon::tensorboard;

namespace {
double now() { return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count(); }
std::string host() {
  char h[256] = {0};
  return gethostname(h, sizeof h - 1) == 0 ? std::string(h) : std::string("localhost");
}
std::string bytes_of(const tb::Event& e) {
  std::string s;
  if (!e.SerializeToString(&s)) throw Error("TensorBoard: an event could not be serialised");
  return s;
}
}  // namespace

EventWriter::EventWriter(const std::string& dir, const std::string& suffix) {
  const auto secs = static_cast<int64_t>(now());
  path_ = dir + "/events.out.tfevents." + std::to_string(secs) + "." + host() + "." + std::to_string(getpid()) + suffix;
  // a second writer of this process in the same second gets its own file
  for (int k = 1; access(path_.c_str(), F_OK) == 0; ++k)
    path_ = dir + "/events.out.tfevents." + std::to_string(secs) + "." + host() + "." + std::to_string(getpid()) + suffix +
            "." + std::to_string(k);
  f_ = std::fopen(path_.c_str(), "wbx");
  if (!f_) throw Error("cannot create the TensorBoard event file '" + path_ + "': " + std::strerror(errno));
  tb::Event e;
  e.set_wall_time(now());
  e.set_file_version("brain.Event:2");
  write(bytes_of(e));
  flush();
}

EventWriter::~EventWriter() {
  if (f_) std::fclose(f_);
}

void EventWriter::write(const std::string& ev) {
  if (failed_) return;  // the first failure was reported; nothing more is written
  unsigned char head[12];
  const uint64_t n = ev.size();
  for (int i = 0; i < 8; ++i) head[i] = static_cast<unsigned char>(n >> (8 * i));
  const uint32_t hc = masked_crc32c(head, 8), dc = masked_crc32c(ev.data(), ev.size());
  for (int i = 0; i < 4; ++i) head[8 + i] = static_cast<unsigned char>(hc >> (8 * i));
  unsigned char tail[4];
  for (int i = 0; i < 4; ++i) tail[i] = static_cast<unsigned char>(dc >> (8 * i));
  if (std::fwrite(head, 1, 12, f_) != 12 || std::fwrite(ev.data(), 1, ev.size(), f_) != ev.size() ||
      std::fwrite(tail, 1, 4, f_) != 4) {
    failed_ = true;
    throw Error("writing the TensorBoard event file '" + path_ + "' failed: " + std::strerror(errno) +
                "; is the disk full?");
  }
}

void EventWriter::flush() {
  if (failed_) return;
  if (std::fflush(f_) != 0) {
    failed_ = true;
    throw Error("writing the TensorBoard event file '" + path_ + "' failed: " + std::strerror(errno) +
                "; is the disk full?");
  }
}

void EventWriter::scalar(const std::string& tag, double value, int64_t step) {
  tb::Event e;
  e.set_wall_time(now());
  e.set_step(step);
  tb::Summary::Value* v = e.mutable_summary()->add_value();
  v->set_tag(tag);
  v->set_simple_value(static_cast<float>(value));
  write(bytes_of(e));
}

void EventWriter::text(const std::string& tag, const std::string& text, int64_t step) {
  tb::Event e;
  e.set_wall_time(now());
  e.set_step(step);
  tb::Summary::Value* v = e.mutable_summary()->add_value();
  v->set_tag(tag);
  v->mutable_metadata()->mutable_plugin_data()->set_plugin_name("text");
  tb::TensorProto* t = v->mutable_tensor();
  t->set_dtype(7);  // DT_STRING, a scalar
  t->mutable_tensor_shape();
  t->add_string_val(text);
  write(bytes_of(e));
}

void EventWriter::session_start(int64_t step) {
  tb::Event e;
  e.set_wall_time(now());
  e.set_step(step);
  e.mutable_session_log()->set_status(tb::SessionLog::START);
  write(bytes_of(e));
}

namespace {
void scalars_of(EventWriter& w, const nlohmann::json& j, const std::string& prefix, int64_t step) {
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (it.key() == "step" && prefix.empty()) continue;
    const std::string tag = prefix.empty() ? it.key() : prefix + "/" + it.key();
    if (it->is_number()) w.scalar(tag, it->get<double>(), step);
    else if (it->is_object()) scalars_of(w, *it, tag, step);
  }
}
}  // namespace

void EventWriter::record(const nlohmann::json& rec) {
  if (!rec.is_object() || !rec.contains("step") || !rec["step"].is_number_integer()) return;
  scalars_of(*this, rec, "", rec["step"].get<int64_t>());
}

#else  // built without protobuf / ISA-L

bool tensorboard_available() { return false; }
uint32_t masked_crc32c(const void*, size_t) { throw Error("this build has no TensorBoard support (HZ_TENSORBOARD=OFF)"); }
EventWriter::EventWriter(const std::string&, const std::string&) {
  throw Error("this build writes no TensorBoard event files (configured with HZ_TENSORBOARD=OFF: no protobuf or ISA-L)");
}
EventWriter::~EventWriter() = default;
void EventWriter::write(const std::string&) {}
void EventWriter::flush() {}
void EventWriter::scalar(const std::string&, double, int64_t) {}
void EventWriter::text(const std::string&, const std::string&, int64_t) {}
void EventWriter::session_start(int64_t) {}
void EventWriter::record(const nlohmann::json&) {}

#endif

}  // namespace hz::io
