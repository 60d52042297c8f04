"""Machinery shared by every family: LLVM helpers for the kernels (``llvm.py``), the kernel
switch (``kernels.py``)."""
