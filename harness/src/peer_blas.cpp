#include <ka/harness/detail/peer_blas.hpp>

#include <ka/harness/detail/bench_case.hpp>

#include <ka/core/error.hpp>

#include <dlfcn.h>
#include <oneapi/dnnl/dnnl.h>  // types and signatures only: oneDNN is loaded with dlopen

#include <algorithm>
#include <climits>
#include <map>
#include <memory>
#include <sstream>

namespace ka::harness::detail {

// Note [Peer libraries]
// ka-bench --vs openblas,blis,onednn times three CPU BLAS libraries beside libtorch, on the
// same seeded inputs and preallocated outputs. OpenBLAS and BLIS both export the same CBLAS
// (cblas_sgemm ...) and BLAS (sgemm_ ...) symbols, and libtorch already calls a BLAS through
// those names, so each is loaded with dlopen(RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND): LOCAL keeps
// its symbols out of the global scope, DEEPBIND makes its own references resolve inside it
// first, and the functions are taken with dlsym on its handle. ka never links them, so a
// build without them works and --vs names the missing package.
//
// On Debian, libtorch itself links libopenblas.so.0 (and libblas.so.3, which the alternatives
// point at OpenBLAS too). dlopen of a file the process has already mapped returns that copy,
// so `openblas` is the OpenBLAS instance libtorch loaded, called through cblas_sgemm directly
// (its flags do not matter then); its thread count is set on that handle. oneDNN (libdnnl.so.2)
// is also linked by libtorch and its dnnl_* names collide with nothing, so it is opened
// RTLD_LOCAL without DEEPBIND (DEEPBIND would give a C++ library its own view of libstdc++'s
// symbols). BLIS is initialised (bli_init) as soon as it is loaded, so that its configuration
// is chosen from the environment of that moment (Note [--isa]): querying BLIS 0.9's
// configuration before bli_init with BLIS_ARCH_TYPE set aborts the process.
//
// Note [Peer threads]
// Every peer runs on the run's --threads, like ka and libtorch: OpenBLAS through
// openblas_set_num_threads on its handle, BLIS through bli_thread_set_num_threads (its global
// default), oneDNN through OpenMP: libgomp reads OMP_NUM_THREADS once, when it is loaded at
// process start, into the initial thread's nthreads-var, and omp_set_num_threads changes that
// value for the calling thread only. So ka-bench sets it from the thread that then calls
// dnnl_sgemm: the main thread, where Google Benchmark runs single-threaded benchmarks.

namespace {

// Note [Peers under sanitizers]
// AddressSanitizer and ThreadSanitizer refuse RTLD_DEEPBIND (their interceptors must see every
// library's calls), so sanitizer builds load the CBLAS peers RTLD_LOCAL only. Their own
// references may then resolve to the BLAS libtorch loaded first (BLIS's cblas_sgemm to
// OpenBLAS's sgemm_): the results are the same GEMM, the timings are not BLIS's. Those builds
// check ka's memory and thread safety, not the peers' speed.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr int kDlFlags = RTLD_NOW | RTLD_LOCAL;
#else
constexpr int kDlFlags = RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND;
#endif

struct PeerFile {
  const char* name;
  const char* path;     // where the Debian package puts it
  const char* soname;   // tried next, through the loader's search path
  const char* package;  // the Debian package providing it
  int flags;
};

const PeerFile& peer_file(const std::string& name) {
  static const PeerFile files[] = {
      {kImplOpenBlas, "/usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.so.0",
       "libopenblas.so.0", "libopenblas0-pthread", kDlFlags},
      {kImplBlis, "/usr/lib/x86_64-linux-gnu/blis-pthread/libblis.so.4", "libblis.so.4",
       "libblis4-pthread", kDlFlags},
      {kImplOneDnn, "/usr/lib/x86_64-linux-gnu/libdnnl.so.2", "libdnnl.so.2", "libdnnl2",
       RTLD_NOW | RTLD_LOCAL},
  };
  for (const PeerFile& f : files) {
    if (name == f.name) return f;
  }
  KA_THROW(ValueError, "--vs ", name, ": unknown library (expected libtorch, openblas, blis or ",
           "onednn)");
}

// A loaded library; the handle is never closed (the process keeps calling into it).
struct Loaded {
  void* handle = nullptr;
  std::string path;
};

Loaded open_peer(const PeerFile& f) {
  for (const char* candidate : {f.path, f.soname}) {
    if (void* h = dlopen(candidate, f.flags)) return {h, candidate};
  }
  KA_THROW(ValueError, missing_peer_message(f.name));
}

template <typename Fn>
Fn symbol(const Loaded& lib, const char* name) {
  auto* fn = reinterpret_cast<Fn>(dlsym(lib.handle, name));
  KA_CHECK(fn != nullptr, lib.path, " has no ", name, " (", dlerror(), ")");
  return fn;
}

bool fits_int(std::int64_t v) { return v >= 0 && v <= INT_MAX; }

// CBLAS's enums as the C ABI passes them.
constexpr int kCblasRowMajor = 101;
constexpr int kCblasNoTrans = 111;
using CblasSgemm = void (*)(int, int, int, int, int, int, float, const float*, int, const float*,
                            int, float, float*, int);

// OpenBLAS and BLIS: cblas_sgemm with 32-bit integers (Debian's libopenblas0 and "32bit" BLIS).
class CblasPeer : public PeerLibrary {
 public:
  explicit CblasPeer(const PeerFile& f) : lib_(open_peer(f)) {
    sgemm_ = symbol<CblasSgemm>(lib_, "cblas_sgemm");
    info_.library = lib_.path;
    info_.entry = "cblas_sgemm";
  }

  [[nodiscard]] PeerInfo info() const override { return info_; }

  Status sgemm(const SgemmArgs& g) const override {
    for (const std::int64_t v : {g.m, g.n, g.k, g.lda, g.ldb, g.ldc}) {
      if (!fits_int(v)) return Status::unsupported("a dimension exceeds cblas_sgemm's int");
    }
    const auto i = [](std::int64_t v) { return static_cast<int>(v); };
    sgemm_(kCblasRowMajor, kCblasNoTrans, kCblasNoTrans, i(g.m), i(g.n), i(g.k), g.alpha, g.a,
           i(g.lda), g.b, i(g.ldb), g.beta, g.c, i(g.ldc));
    return Status::ok();
  }

 protected:
  Loaded lib_;
  PeerInfo info_;
  CblasSgemm sgemm_ = nullptr;
};

class OpenBlasPeer final : public CblasPeer {
 public:
  explicit OpenBlasPeer(const PeerFile& f) : CblasPeer(f) {
    set_threads_ = symbol<void (*)(int)>(lib_, "openblas_set_num_threads");
    info_.detail = symbol<char* (*)()>(lib_, "openblas_get_config")();
    info_.core = symbol<char* (*)()>(lib_, "openblas_get_corename")();
    info_.product = "OpenBLAS";
    info_.core_kind = "core";
    info_.threads_by = "openblas_set_num_threads";
    // The config reads "OpenBLAS 0.3.21 NO_LAPACKE DYNAMIC_ARCH ...".
    std::istringstream words(info_.detail);
    std::string first;
    words >> first >> info_.version;
  }
  void set_threads(int threads) override {
    set_threads_(threads);
    info_.threads = threads;
  }

 private:
  void (*set_threads_)(int) = nullptr;
};

class BlisPeer final : public CblasPeer {
 public:
  explicit BlisPeer(const PeerFile& f) : CblasPeer(f) {
    symbol<void (*)()>(lib_, "bli_init")();  // see Note [Peer libraries]
    // dim_t is 64-bit in every BLIS build; an int argument travels in the same register.
    set_threads_ = symbol<void (*)(std::int64_t)>(lib_, "bli_thread_set_num_threads");
    arch_string_ = symbol<const char* (*)(int)>(lib_, "bli_arch_string");
    info_.version = symbol<const char* (*)()>(lib_, "bli_info_get_version_str")();
    info_.core = arch_string_(symbol<int (*)()>(lib_, "bli_arch_query_id")());
    info_.product = "BLIS";
    info_.core_kind = "configuration";
    info_.threads_by = "bli_thread_set_num_threads";
  }
  void set_threads(int threads) override {
    set_threads_(threads);
    info_.threads = threads;
  }
  // bli_arch_string indexes a table whose last entry is "generic" in every BLIS release.
  [[nodiscard]] int arch_id(const std::string& config) const {
    for (int id = 0; id < 256; ++id) {
      const char* s = arch_string_(id);
      if (s != nullptr && config == s) return id;
      if (s == nullptr || std::string(s) == "generic") break;
    }
    KA_THROW(ValueError, "BLIS ", info_.version, " (", lib_.path, ") has no configuration '",
             config, "'");
  }

 private:
  void (*set_threads_)(std::int64_t) = nullptr;
  const char* (*arch_string_)(int) = nullptr;
};

std::string onednn_isa_name(dnnl_cpu_isa_t isa) {
  switch (isa) {
    case dnnl_cpu_isa_all: return "all";
    case dnnl_cpu_isa_sse41: return "sse41";
    case dnnl_cpu_isa_avx: return "avx";
    case dnnl_cpu_isa_avx2: return "avx2";
    case dnnl_cpu_isa_avx2_vnni: return "avx2_vnni";
    case dnnl_cpu_isa_avx512_mic: return "avx512_mic";
    case dnnl_cpu_isa_avx512_mic_4ops: return "avx512_mic_4ops";
    case dnnl_cpu_isa_avx512_core: return "avx512_core";
    case dnnl_cpu_isa_avx512_core_vnni: return "avx512_core_vnni";
    case dnnl_cpu_isa_avx512_core_bf16: return "avx512_core_bf16";
    case dnnl_cpu_isa_avx512_core_amx: return "avx512_core_amx";
  }
  std::ostringstream out;
  out << "isa 0x" << std::hex << static_cast<unsigned>(isa);
  return out.str();
}

class OneDnnPeer final : public PeerLibrary {
 public:
  explicit OneDnnPeer(const PeerFile& f) : lib_(open_peer(f)) {
    sgemm_ = symbol<decltype(&dnnl_sgemm)>(lib_, "dnnl_sgemm");
    const dnnl_version_t* v = symbol<decltype(&dnnl_version)>(lib_, "dnnl_version")();
    info_.product = "oneDNN";
    info_.library = lib_.path;
    info_.entry = "dnnl_sgemm";
    info_.core_kind = "ISA";
    info_.version = std::to_string(v->major) + "." + std::to_string(v->minor) + "." +
                    std::to_string(v->patch);
    info_.detail = std::string("git ") + (v->hash != nullptr ? v->hash : "?");
    using EffectiveIsa = decltype(&dnnl_get_effective_cpu_isa);
    info_.core = onednn_isa_name(symbol<EffectiveIsa>(lib_, "dnnl_get_effective_cpu_isa")());
    info_.threads_by = "omp_set_num_threads";
    // libtorch links libgomp, so it is in the global scope; else load it.
    using SetThreads = void (*)(int);
    omp_set_num_threads_ = reinterpret_cast<SetThreads>(dlsym(RTLD_DEFAULT, "omp_set_num_threads"));
    if (omp_set_num_threads_ == nullptr) {
      if (void* gomp = dlopen("libgomp.so.1", RTLD_NOW | RTLD_LOCAL)) {
        omp_set_num_threads_ = reinterpret_cast<SetThreads>(dlsym(gomp, "omp_set_num_threads"));
      }
    }
    KA_CHECK(omp_set_num_threads_ != nullptr, "--vs onednn: omp_set_num_threads not found ",
             "(libgomp.so.1, Debian package libgomp1)");
  }

  [[nodiscard]] PeerInfo info() const override { return info_; }

  void set_threads(int threads) override {
    omp_set_num_threads_(threads);  // the calling thread's; see Note [Peer threads]
    info_.threads = threads;
  }

  Status sgemm(const SgemmArgs& g) const override {
    const dnnl_status_t st =
        sgemm_('N', 'N', g.m, g.n, g.k, g.alpha, g.a, g.lda, g.b, g.ldb, g.beta, g.c, g.ldc);
    if (st != dnnl_success) {
      return Status::unsupported("dnnl_sgemm returned status " + std::to_string(st));
    }
    return Status::ok();
  }

 private:
  Loaded lib_;
  PeerInfo info_;
  decltype(&dnnl_sgemm) sgemm_ = nullptr;
  void (*omp_set_num_threads_)(int) = nullptr;
};

}  // namespace

std::vector<std::string> parse_references(const std::string& list) {
  std::vector<std::string> out;
  std::size_t begin = 0;
  while (true) {
    const std::size_t end = list.find(',', begin);
    const std::string name = list.substr(begin, end == std::string::npos ? end : end - begin);
    KA_CHECK(!name.empty(), "--vs '", list, "': empty entry (expected a comma list of libtorch, ",
             "openblas, blis, onednn, ka-kernel)");
    KA_CHECK(name == kImplLibtorch || name == kImplKaKernel || is_peer(name), "--vs ", name,
             ": unknown implementation (expected libtorch, openblas, blis, onednn or ka-kernel)");
    KA_CHECK(std::find(out.begin(), out.end(), name) == out.end(), "--vs '", list, "' names ",
             name, " twice");
    out.push_back(name);
    if (end == std::string::npos) break;
    begin = end + 1;
  }
  return out;
}

bool is_peer(const std::string& impl) {
  return impl == kImplOpenBlas || impl == kImplBlis || impl == kImplOneDnn;
}

std::string PeerInfo::kernel() const {
  return product + " " + version + " " + entry + ", " + core_kind + " " + core;
}

std::string missing_peer_message(const std::string& name) {
  const PeerFile& f = peer_file(name);
  return "--vs " + name + ": " + f.soname + " not found; install the Debian package " +
         f.package + " (scripts/install-deps.sh installs it)";
}

PeerLibrary& peer_library(const std::string& name) {
  static std::map<std::string, std::unique_ptr<PeerLibrary>> loaded;
  auto& slot = loaded[name];
  if (slot == nullptr) {
    const PeerFile& f = peer_file(name);
    if (name == kImplOpenBlas) {
      slot = std::make_unique<OpenBlasPeer>(f);
    } else if (name == kImplBlis) {
      slot = std::make_unique<BlisPeer>(f);
    } else {
      slot = std::make_unique<OneDnnPeer>(f);
    }
  }
  return *slot;
}

int blis_arch_id(const std::string& config) {
  return static_cast<const BlisPeer&>(peer_library(kImplBlis)).arch_id(config);
}

}  // namespace ka::harness::detail
