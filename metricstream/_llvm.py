"""LLVM IR helpers shared by the kernels' intrinsics: declaring an LLVM intrinsic once per
module, and a masked vector load (lanes outside the mask are not read from memory)."""

from __future__ import annotations

from llvmlite import ir

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
