"""The protobuf wire format, written independently of the library's reader."""

__all__ = ['varint']


def varint(n):
    """``n`` encoded as a protobuf varint, written independently of the library's reader
    (negative numbers are sign-extended to 64 bits, as protobuf does for int32)."""
    n &= (1 << 64) - 1
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)
