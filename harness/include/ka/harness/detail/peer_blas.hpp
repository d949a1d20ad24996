// The CPU BLAS libraries ka-bench can time beside libtorch (--vs): OpenBLAS and BLIS through
// their CBLAS cblas_sgemm, oneDNN through dnnl_sgemm, each found with dlopen at run time so
// the harness has no link-time dependency on them. Torch-free. See Note [Peer libraries].
// Internal to ka (namespace detail): for the harness and its unit tests, not a stable API.
#pragma once

#include <ka/core/status.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace ka::harness::detail {

constexpr const char* kImplOpenBlas = "openblas";  ///< OpenBLAS's cblas_sgemm.
constexpr const char* kImplBlis = "blis";          ///< BLIS's cblas_sgemm.
constexpr const char* kImplOneDnn = "onednn";      ///< oneDNN's dnnl_sgemm.

/// What `--vs LIST` names (comma-separated), in its order: the references libtorch, openblas,
/// blis, onednn, and ka-kernel (ka's bare GEMM kernel), each at most once. Throws ka::ValueError for an empty list or entry, an unknown
/// name (the message lists the known ones) or a repeated one.
std::vector<std::string> parse_references(const std::string& list);

/// True for the references ka-bench loads itself (openblas, blis, onednn).
bool is_peer(const std::string& impl);

/// A row-major fp32 GEMM as the peers take it: C = alpha * A B + beta * C, A m x k, B k x n,
/// C m x n, each with its leading dimension.
struct SgemmArgs {
  std::int64_t m = 0;
  std::int64_t n = 0;
  std::int64_t k = 0;
  float alpha = 1.0F;
  const float* a = nullptr;
  std::int64_t lda = 1;
  const float* b = nullptr;
  std::int64_t ldb = 1;
  float beta = 0.0F;
  float* c = nullptr;
  std::int64_t ldc = 1;
};

/// What a loaded peer is and which kernels it dispatches to, read from the library itself.
struct PeerInfo {
  std::string product;  ///< "OpenBLAS", "BLIS", "oneDNN".
  std::string library;  ///< The file loaded.
  std::string version;  ///< "0.3.21", "0.9.0", "2.6.3".
  std::string entry;    ///< The GEMM called: "cblas_sgemm", "dnnl_sgemm".
  /// What `core` names: OpenBLAS's "core", BLIS's "configuration", oneDNN's "ISA".
  std::string core_kind;
  /// The kernels it picked for this CPU: OpenBLAS's core ("Haswell"), BLIS's configuration
  /// ("skx"), oneDNN's effective ISA ("avx512_core_bf16").
  std::string core;
  std::string detail;      ///< openblas_get_config(); oneDNN's git hash; "" for BLIS.
  std::string threads_by;  ///< The call that sets its threads.
  int threads = 0;         ///< As last set.

  /// "OpenBLAS 0.3.21 cblas_sgemm, core Haswell" (results.kernel, the header, the runs row).
  [[nodiscard]] std::string kernel() const;
};

/// One loaded peer library. Loaded once per process (peer_library) and never unloaded.
class PeerLibrary {
 public:
  virtual ~PeerLibrary() = default;
  PeerLibrary() = default;
  PeerLibrary(const PeerLibrary&) = delete;
  PeerLibrary& operator=(const PeerLibrary&) = delete;

  [[nodiscard]] virtual PeerInfo info() const = 0;
  /// Sets the library's threads; call it from the thread that will call sgemm (oneDNN's
  /// OpenMP thread count is per calling thread). See Note [Peer threads].
  virtual void set_threads(int threads) = 0;
  /// One GEMM. Not ok when a dimension does not fit the library's integers or it reports an
  /// error.
  virtual Status sgemm(const SgemmArgs& args) const = 0;
};

/// The peer `name` (openblas, blis, onednn), loaded on first use. Throws ka::ValueError when
/// its library is not installed, naming the file and the Debian package that provides it.
PeerLibrary& peer_library(const std::string& name);

/// The message of a peer whose library is missing ("--vs blis: libblis.so.4 not found; ...").
std::string missing_peer_message(const std::string& name);

/// BLIS's number for its configuration `config` ("haswell"), which BLIS_ARCH_TYPE takes
/// (BLIS 0.9 reads a number; a name is silently ignored). Loads BLIS; throws ka::ValueError
/// when this BLIS has no such configuration.
int blis_arch_id(const std::string& config);

}  // namespace ka::harness::detail
