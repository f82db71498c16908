// Horizon: the tensor-core kernels on Hopper's warpgroup MMA (wgmma.mma_async; mma_body.h, kWg): the
// forward, dQ and dK/dV kernels with their products as warpgroup MMAs read straight from
// 128-byte-swizzled shared-memory tiles, everything between them the mma.sync kernels' code. wgmma
// exists on sm_90a alone, so this file and attn_wgmma_general.cu (the general variant) are compiled
// for sm_90a and nothing else (CMakeLists.txt, hz_attention_sm90a) and run only on a
// compute-capability 9.0 GPU whose binary has the code (wgmma_supported). This file: the plain
// variant (HZ_TILING_PLAIN, as attn_mma.cu), bf16, D 64 and 128, the two-pass backward and the
// one-pass one (with HZ_ATTN_BACKWARD=one_pass), the forward with the intra-warpgroup overlap or
// (HZ_ATTN_MMA=wgmma_serial) without it; asked for by HZ_ATTN_MMA until a GPU has timed them
// (attn_mma.cu, use_wgmma).
#define HZ_TILING_PLAIN
#include <cuda.h>
#include <cudaTypedefs.h>

#include <algorithm>
#include <map>
#include <mutex>

#include "attention/cuda/mma_launch.cuh"

namespace hz::attn::cuda_impl {

bool wgmma_supported(int device) {
  static std::mutex mu;
  static std::map<int, bool> known;
  std::lock_guard<std::mutex> lock(mu);
  auto it = known.find(device);
  if (it != known.end()) return it->second;
  hz::cuda::use_device(device);
  int major = 0, minor = 0, smem = 0;
  cudaFuncAttributes fa{};
  const bool ok = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) == cudaSuccess &&
                  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) == cudaSuccess &&
                  major == 9 && minor == 0 &&
                  cudaDeviceGetAttribute(&smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) == cudaSuccess &&
                  smem >= std::max({mma::FwdShape<128, 1, false, true, mma::Config<128>::kFwdWGOverlap, true>::kSmem,
                                    mma::DqShape<128, false, true>::kSmem,
                                    mma::DkvShape<128, mma::Config<128>::kDkvBq, false, true>::kSmem}) &&
                  cudaFuncGetAttributes(&fa, mma::fwd_ws_kernel<64, false>) == cudaSuccess &&
                  fa.binaryVersion == 90;
  cudaGetLastError();  // a missing kernel image is an answer here, not an error
  return known[device] = ok;
}

void encode_tile_map(mma::TileMap& m, const uint16_t* base, int64_t cols, int64_t rows, int64_t mats, int box_rows) {
  static_assert(sizeof(CUtensorMap) == sizeof(mma::TileMap) && alignof(CUtensorMap) <= alignof(mma::TileMap),
                "mma::TileMap holds a CUtensorMap");
  static const PFN_cuTensorMapEncodeTiled_v12000 encode = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found{};
    HZ_CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &found));
    HZ_CHECK(found == cudaDriverEntryPointSuccess && fn != nullptr, DeviceError,
             "attention: the CUDA driver has no cuTensorMapEncodeTiled (the bulk tensor copy needs a driver for CUDA 12+)");
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
  }();
  const cuuint64_t dims[3] = {static_cast<cuuint64_t>(cols), static_cast<cuuint64_t>(rows),
                              static_cast<cuuint64_t>(mats)};
  const cuuint64_t strides[2] = {static_cast<cuuint64_t>(cols) * 2, static_cast<cuuint64_t>(rows * cols) * 2};
  const cuuint32_t box[3] = {64, static_cast<cuuint32_t>(box_rows), 1}, step[3] = {1, 1, 1};
  const CUresult r = encode(reinterpret_cast<CUtensorMap*>(&m), CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 3,
                            const_cast<uint16_t*>(base), dims, strides, box, step, CU_TENSOR_MAP_INTERLEAVE_NONE,
                            CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
                            CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  HZ_CHECK(r == CUDA_SUCCESS, DeviceError, "attention: cuTensorMapEncodeTiled failed (", static_cast<int>(r), ") for a ",
           mats, " x ", rows, " x ", cols, " bf16 tensor");
}

void wgmma_forward_launch(const AttnKernelParams& P, const mma::Args& a, cudaStream_t s) {
  if (P.D == 64) forward_wg<64, false>(P, a, s);
  else forward_wg<128, false>(P, a, s);
}
void wgmma_backward_launch(const AttnKernelParams& P, const mma::Args& a, cudaStream_t s) {
  if (P.D == 64) backward_wg<64, false>(P, a, s);
  else backward_wg<128, false>(P, a, s);
}
void wgmma_backward_one_pass_launch(const AttnKernelParams& P, const mma::Args& a, const Tensor& dq, cudaStream_t s) {
  if (P.D == 64) backward_one_pass<64, false, true>(P, a, dq, s);
  else backward_one_pass<128, false, true>(P, a, dq, s);
}

}  // namespace hz::attn::cuda_impl
