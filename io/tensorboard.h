// Horizon: TensorBoard event files (`metrics.tensorboard`, on by default), so that a run's scalars
// open in TensorBoard (or anything reading its format) with nothing converted by hand.
//
// Format: a file named events.out.tfevents.<seconds>.<host>.<pid>[.<suffix>] holds records, each
//   u64 length (little-endian), u32 masked CRC32C of those 8 bytes, the bytes of one Event message
//   (io/tensorboard.proto, protobuf), u32 masked CRC32C of them,
// where masked(c) = ((c >> 15) | (c << 17)) + 0xa282ead8 and CRC32C is the Castagnoli CRC (ISA-L's
// crc32_iscsi). The first record is the file version "brain.Event:2".
// What Horizon writes: scalars (Summary.Value.simple_value, float), text (a string tensor with the
// "text" plugin's metadata: the resolved recipe), and at a resume a SessionLog START at the first
// step trained again, so TensorBoard drops what the interrupted run recorded from there on. Every
// write is checked: a full disk is an hz::Error naming the file, as for a checkpoint.
// Builds configured without protobuf or ISA-L (HZ_TENSORBOARD=OFF, e.g. the GPU machine's) have
// no writer: tensorboard_available() is false and EventWriter's constructor throws.
#pragma once
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>

#include <nlohmann/json_fwd.hpp>

namespace hz::io {

bool tensorboard_available();

// Masked CRC32C as TensorBoard's record framing uses it (exposed for tests).
uint32_t masked_crc32c(const void* data, size_t n);

class EventWriter {
 public:
  // Creates a new event file in `dir` (which must exist); suffix tells writers of one directory
  // apart (".eval" for horizon eval).
  explicit EventWriter(const std::string& dir, const std::string& suffix = "");
  ~EventWriter();
  EventWriter(const EventWriter&) = delete;
  EventWriter& operator=(const EventWriter&) = delete;

  const std::string& path() const { return path_; }
  void scalar(const std::string& tag, double value, int64_t step);
  void text(const std::string& tag, const std::string& text, int64_t step);
  void session_start(int64_t step);
  // One scalar per number of a metrics.jsonl record, tagged by its path ("loss", "eval/256/loss"),
  // at the record's "step" (a record without one is ignored).
  void record(const nlohmann::json& rec);
  void flush();  // the records written so far reach the file; hz::Error when they cannot

 private:
  void write(const std::string& event_bytes);
  std::string path_;
  std::FILE* f_ = nullptr;
  bool failed_ = false;
};

}  // namespace hz::io
