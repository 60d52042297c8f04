"""LLVM IR helpers shared by the kernels' intrinsics: declaring an LLVM intrinsic once per
module, a masked vector load (lanes outside the mask are not read from memory), and a typed
pointer at an integer address (arrays passed by address, as one int64 table or a tensor's data
pointer, cost no Numba array unboxing)."""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.extending import intrinsic

_I32 = ir.IntType(32)


def declare(
    builder: ir.IRBuilder, name: str, return_type: ir.Type, argument_types: list[ir.Type]
) -> ir.Function:
    """The function ``name`` of the builder's module, declared on first use."""
    function = builder.module.globals.get(name)
    if function is None:
        function = ir.Function(builder.module, ir.FunctionType(return_type, argument_types), name)
    return function


def masked_load(
    builder: ir.IRBuilder, pointer: ir.Value, mask: ir.Value, passthru: ir.Value, align: int
) -> ir.Value:
    """The lanes of ``mask`` from the float vector at ``pointer``, the others ``passthru``
    (their memory unread: a load may end exactly at the end of an array). The intrinsic is
    named with typed pointers, which LLVM 14 (numba 0.59) requires and LLVM 22 accepts."""
    vector = passthru.type
    element = "f32" if vector.element == ir.FloatType() else "f64"
    suffix = f"v{vector.count}{element}"
    load = declare(
        builder,
        f"llvm.masked.load.{suffix}.p0{suffix}",
        vector,
        [vector.as_pointer(), _I32, mask.type, vector],
    )
    address = builder.bitcast(pointer, vector.as_pointer())
    return builder.call(load, [address, ir.Constant(_I32, align), mask, passthru])


@intrinsic
def pointer_to(typingctx, address, dtype):  # type: ignore[no-untyped-def]
    """A pointer to ``dtype`` elements at the integer ``address``: ``dtype`` is a scalar class
    such as ``np.int64`` or an array's dtype. Wrap it in ``numba.carray`` for an array."""
    if not isinstance(address, types.Integer):
        return None
    if isinstance(dtype, types.NumberClass):
        element = dtype.instance_type
    elif isinstance(dtype, types.DType):
        element = dtype.dtype
    else:
        return None
    signature = types.CPointer(element)(address, dtype)

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        return builder.inttoptr(args[0], context.get_value_type(signature.return_type))

    return signature, codegen
