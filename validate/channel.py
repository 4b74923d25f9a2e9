"""How the judge and its workers talk: framed JSON over a Unix socket, tensors in shared memory.

The judge never unpickles anything a worker sends: a worker's messages are JSON (bounded in size)
and its tensors arrive as raw bytes in a shared-memory block (a memfd) that the judge created,
laid out by the judge, and copies out of before it looks at them. The judge's own messages to a
worker are JSON too, with the block's file descriptor attached (SCM_RIGHTS) when a new one is made,
so no name in the filesystem ever points at a tensor the gate holds.

A tensor crosses as a ``TensorMeta`` (shape, stride, dtype); non-tensor values (scalars, None,
strings, dtypes, lists of them) cross as JSON.
"""
from __future__ import annotations

import fcntl
import json
import mmap
import os
import socket
import struct
from dataclasses import dataclass
from typing import Any

MAX_MESSAGE = 8 << 20  # bytes of JSON one message may carry
_HEADER = struct.Struct("!I")
_ALIGN = 64


class ChannelClosed(Exception):
    """The other side went away (its process died or closed the socket)."""


class ProtocolError(Exception):
    """The other side sent something that is not a well-formed message."""


def pair() -> tuple[socket.socket, socket.socket]:
    return socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)


def send(sock: socket.socket, message: dict, fds: list[int] | tuple[int, ...] = ()) -> None:
    data = json.dumps(message, separators=(",", ":")).encode()
    if len(data) > MAX_MESSAGE:
        raise ProtocolError(f"message of {len(data)} bytes is over the {MAX_MESSAGE}-byte limit")
    frame = _HEADER.pack(len(data)) + data
    if fds:
        sent = socket.send_fds(sock, [frame[:_HEADER.size]], list(fds))
        sock.sendall(frame[sent:])
    else:
        sock.sendall(frame)


def receive(sock: socket.socket, *, accept_fds: bool = False) -> tuple[dict, list[int]]:
    """One message (and the descriptors sent with it, when ``accept_fds``; otherwise any are closed)."""
    fds: list[int] = []
    if accept_fds:
        head, fds, _flags, _addr = socket.recv_fds(sock, _HEADER.size, 16)
        head = head + _exactly(sock, _HEADER.size - len(head)) if 0 < len(head) < _HEADER.size else head
    else:
        head = _exactly(sock, _HEADER.size)
    if len(head) < _HEADER.size:
        for fd in fds:
            os.close(fd)
        raise ChannelClosed("the other side closed the channel")
    (size,) = _HEADER.unpack(head)
    if size > MAX_MESSAGE:
        raise ProtocolError(f"a message of {size} bytes is over the {MAX_MESSAGE}-byte limit")
    body = _exactly(sock, size)
    if len(body) < size:
        raise ChannelClosed("the other side closed the channel mid-message")
    try:
        message = json.loads(body)
    except ValueError as exc:
        raise ProtocolError(f"not JSON: {exc}") from None
    if not isinstance(message, dict):
        raise ProtocolError(f"expected a JSON object, got {type(message).__name__}")
    return message, fds


def _exactly(sock: socket.socket, n: int) -> bytes:
    chunks, got = [], 0
    while got < n:
        chunk = sock.recv(min(n - got, 1 << 20))
        if not chunk:
            break
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


# -- tensors --------------------------------------------------------------------------------------------
_DTYPES = ("float64", "float32", "float16", "bfloat16", "int64", "int32", "int16", "int8", "uint8", "bool",
           "float8_e4m3fn", "float8_e5m2", "complex64")


@dataclass(frozen=True)
class TensorMeta:
    """A tensor's shape, strides (elements) and dtype name; where it lies in a block is the layout's."""

    name: str
    shape: tuple[int, ...]
    stride: tuple[int, ...]
    dtype: str

    @property
    def extent(self) -> int:
        """Elements from the first to one past the last, through the strides."""
        if any(s == 0 for s in self.shape):
            return 0
        return 1 + sum((s - 1) * st for s, st in zip(self.shape, self.stride))

    def to_json(self) -> dict:
        return {"name": self.name, "shape": list(self.shape), "stride": list(self.stride), "dtype": self.dtype}

    @classmethod
    def from_json(cls, value: Any) -> "TensorMeta":
        """Parses a worker's description, checking every field (it may be hostile)."""
        try:
            name, shape, stride, dtype = value["name"], value["shape"], value["stride"], value["dtype"]
        except (TypeError, KeyError):
            raise ProtocolError(f"not a tensor description: {str(value)[:200]}") from None
        ints = lambda xs: isinstance(xs, list) and len(xs) <= 16 and all(  # noqa: E731
            isinstance(x, int) and not isinstance(x, bool) and 0 <= x < 2**40 for x in xs)
        if not (isinstance(name, str) and len(name) <= 200 and ints(shape) and ints(stride)
                and len(shape) == len(stride) and dtype in _DTYPES):
            raise ProtocolError(f"bad tensor description: {str(value)[:200]}")
        return cls(name, tuple(shape), tuple(stride), dtype)


def meta_of(name: str, tensor) -> TensorMeta:
    """The description of ``tensor``; overlapping layouts (expanded views) cross as contiguous."""
    stride = tuple(tensor.stride())
    if not tensor.is_contiguous() and (0 in stride or not _non_overlapping(tensor.shape, stride)):
        stride = _contiguous_stride(tuple(tensor.shape))
    return TensorMeta(name, tuple(tensor.shape), stride, str(tensor.dtype).removeprefix("torch."))


def _contiguous_stride(shape: tuple[int, ...]) -> tuple[int, ...]:
    out, acc = [], 1
    for size in reversed(shape):
        out.append(acc)
        acc *= max(size, 1)
    return tuple(reversed(out))


def _non_overlapping(shape, stride) -> bool:
    dims = sorted((st, s) for s, st in zip(shape, stride) if s > 1)
    reach = 1
    for st, s in dims:
        if st < reach:
            return False
        reach = st * s
    return True


def itemsize(dtype: str) -> int:
    import torch

    return torch.empty((), dtype=getattr(torch, dtype)).element_size()


def layout(metas: list[TensorMeta]) -> tuple[list[int], int]:
    """Byte offsets of each tensor in a block (aligned), and the block's size."""
    offsets, at = [], 0
    for meta in metas:
        offsets.append(at)
        at += -(-meta.extent * itemsize(meta.dtype) // _ALIGN) * _ALIGN
    return offsets, max(at, _ALIGN)


class Block:
    """A shared-memory block (memfd) mapped into this process; ``fd`` is what crosses to the peer."""

    def __init__(self, size: int, fd: int | None = None):
        self.size = size
        if fd is None:  # ours: sealed at its size, so the peer can neither shrink it (a SIGBUS here) nor grow it
            fd = os.memfd_create("skel-gate", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
            os.ftruncate(fd, size)
            fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL)
        elif os.fstat(fd).st_size < size:
            os.close(fd)
            raise ProtocolError(f"shared block is smaller than the {size} bytes announced")
        self.fd = fd
        self._map = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)

    def view(self, meta: TensorMeta, offset: int):
        """``meta``'s tensor over the block's bytes at ``offset`` (no copy; CPU)."""
        import torch

        dtype = getattr(torch, meta.dtype)
        nbytes = meta.extent * itemsize(meta.dtype)
        if offset < 0 or offset + nbytes > self.size:
            raise ProtocolError(f"tensor {meta.name!r} does not fit the shared block")
        if nbytes == 0:
            return torch.empty(meta.shape, dtype=dtype)
        flat = torch.frombuffer(self._map, dtype=dtype, count=meta.extent, offset=offset)
        return flat.as_strided(meta.shape, meta.stride)

    def close(self) -> None:
        try:
            self._map.close()
        except BufferError:  # a view still refers to it: the mapping goes with the last view
            pass
        try:
            os.close(self.fd)
        except OSError:
            pass


def write_tensors(block: Block, metas: list[TensorMeta], offsets: list[int], tensors: list) -> None:
    for meta, offset, tensor in zip(metas, offsets, tensors):
        if meta.extent:
            block.view(meta, offset).copy_(tensor)


def read_tensors(block: Block, metas: list[TensorMeta], offsets: list[int], device: str) -> dict:
    """Private copies of the block's tensors on ``device`` (the block may change under us later)."""
    import torch

    out = {}
    for meta, offset in zip(metas, offsets):
        view = block.view(meta, offset)
        copy = torch.empty_strided(meta.shape, meta.stride, dtype=view.dtype, device=device)
        copy.copy_(view)
        out[meta.name] = copy
    return out


# -- plain values -----------------------------------------------------------------------------------------
def encode_value(value: Any) -> Any:
    """A non-tensor argument as JSON; raises TypeError for what cannot cross."""
    import torch

    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, torch.dtype):
        return {"dtype": str(value).removeprefix("torch.")}
    if isinstance(value, (list, tuple)):
        return {"list" if isinstance(value, list) else "tuple": [encode_value(v) for v in value]}
    raise TypeError(f"a {type(value).__name__} (the gate passes tensors, numbers, strings, None, dtypes and"
                    f" lists or tuples of them)")


def decode_value(value: Any) -> Any:
    import torch

    if isinstance(value, dict):
        if "dtype" in value and value["dtype"] in _DTYPES:
            return getattr(torch, value["dtype"])
        if "list" in value:
            return [decode_value(v) for v in value["list"]]
        if "tuple" in value:
            return tuple(decode_value(v) for v in value["tuple"])
        raise ProtocolError(f"bad value: {str(value)[:200]}")
    return value
