// The operators libka_torch serves: each runs ka's pipeline when ka takes the call and
// libtorch's own CPU kernel (at::cpu::) when it does not. Registered as torch.ops.ka.<op>
// and, while ka is enabled, in front of aten's CPU kernels.
#pragma once

#include <ka/runtime/runtime.hpp>

#include <torch/library.h>

namespace ka::pytorch::detail {

/// ka's runtime, made on first use: its first construction loads KA_TUNED_TABLE, and throws
/// ka::DbError naming the file when that does not load (again on each later use, until it
/// loads). Every served call goes through it first, so the table applies to torch.ops.ka
/// calls without enable() too.
runtime::Runtime& runtime_with_table();

/// Adds the CPU kernels of the aten operators ka can take over to `lib` (an IMPL library
/// for namespace `aten`, or `ka` with the same schemas).
void impl_served_ops(::torch::Library& lib);
/// Adds ka's kernels for aten's composite operators it takes over (layer_norm) to `cpu` and
/// `autograd_cpu`, IMPL libraries for namespace `aten` at those keys (Note [Overriding a
/// composite operator]).
void impl_composite_overrides(::torch::Library& cpu, ::torch::Library& autograd_cpu);
/// Adds the composite operators that exist only as torch.ops.ka.<op> (linear, layer_norm,
/// softmax.int): in aten they are CompositeImplicitAutograd and reach ka through the
/// operators above.
void impl_ka_only_ops(::torch::Library& lib);
/// Defines the operators of impl_served_ops and impl_ka_only_ops in `lib` (namespace ka)
/// with aten's schemas.
void def_served_ops(::torch::Library& lib);

/// Registers, for every torch.ops.ka operator, autograd's "not implemented" kernels: a
/// backward through torch.ops.ka.<op> is a clear error (the aten override keeps autograd).
/// `inplace_or_view` is an IMPL library for the ADInplaceOrView key.
void impl_autograd_not_implemented(::torch::Library& autograd,
                                   ::torch::Library& inplace_or_view);

}  // namespace ka::pytorch::detail
