"""A reader of the protobuf wire format, enough to decode small messages (Caffe's ``Datum`` and
``BlobProto``) without protobuf's compiler or the message's generated code.

Example::

    for number, wire_type, value in message_fields(serialized):
        if number == 1 and wire_type == VARINT:
            channels = int32(value)
"""

__all__ = ['VARINT', 'FIXED64', 'LENGTH_DELIMITED', 'FIXED32', 'read_varint', 'message_fields',
           'packed_varints', 'int32']

VARINT, FIXED64, LENGTH_DELIMITED, FIXED32 = 0, 1, 2, 5


def read_varint(buf, pos):
    """The varint at ``buf[pos:]`` and the position after it.

    Raises:
        ValueError: it is truncated or longer than 10 bytes.
    """
    value = shift = 0
    while pos < len(buf) and shift < 70:
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7
    raise ValueError("truncated or invalid varint")


def message_fields(buf):
    """Yield ``(field number, wire type, value)`` for each field of a serialized message: an int for
    a varint, bytes for the others (8 bytes, the length-delimited payload, 4 bytes).

    Raises:
        ValueError: the message is truncated, or uses groups (wire types 3 and 4).
    """
    pos, end = 0, len(buf)
    while pos < end:
        tag, pos = read_varint(buf, pos)
        number, wire_type = tag >> 3, tag & 7
        if wire_type == VARINT:
            value, pos = read_varint(buf, pos)
        else:
            if wire_type == LENGTH_DELIMITED:
                size, pos = read_varint(buf, pos)
            elif wire_type in (FIXED64, FIXED32):
                size = 8 if wire_type == FIXED64 else 4
            else:
                raise ValueError("field {} has the unsupported wire type {}".format(number, wire_type))
            if pos + size > end:
                raise ValueError("field {} is truncated".format(number))
            value, pos = bytes(buf[pos:pos + size]), pos + size
        yield number, wire_type, value


def packed_varints(payload):
    """The list of varints of a packed repeated field's payload."""
    values, pos = [], 0
    while pos < len(payload):
        value, pos = read_varint(payload, pos)
        values.append(value)
    return values


def int32(varint):
    """The int32 a varint encodes (negative numbers are sign-extended to 64 bits on the wire)."""
    value = varint & 0xFFFFFFFF
    return value - (1 << 32) if value >= 1 << 31 else value
