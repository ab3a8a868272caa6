"""utils.protowire: decoding protobuf wire-format messages encoded by hand (and by protobuf itself)."""

import struct

import pytest

from tensorpack_lite.utils.protowire import (FIXED32, FIXED64, LENGTH_DELIMITED, VARINT, int32,
                                             message_fields, packed_varints, read_varint)
from helpers.protobuf import varint


def field(number, wire_type, payload):
    return varint(number << 3 | wire_type) + payload


def test_varints_round_trip_and_report_where_they_end():
    for n in (0, 1, 127, 128, 300, 2 ** 31 - 1, 2 ** 63 + 5):
        buf = b'\x00' + varint(n) + b'\xff'
        assert read_varint(buf, 1) == (n, len(buf) - 1)
    assert int32(read_varint(varint(-3), 0)[0]) == -3
    assert int32(2 ** 31 - 1) == 2 ** 31 - 1


def test_fields_of_every_wire_type():
    message = (field(1, VARINT, varint(150)) + field(2, LENGTH_DELIMITED, varint(3) + b'abc')
               + field(3, FIXED32, struct.pack('<f', 1.5)) + field(4, FIXED64, struct.pack('<d', -2.25))
               + field(5, LENGTH_DELIMITED, varint(3) + varint(1) + varint(300)[:2]))
    fields = list(message_fields(message))
    assert fields[0] == (1, VARINT, 150)
    assert fields[1] == (2, LENGTH_DELIMITED, b'abc')
    assert struct.unpack('<f', fields[2][2]) == (1.5,) and fields[2][:2] == (3, FIXED32)
    assert struct.unpack('<d', fields[3][2]) == (-2.25,) and fields[3][:2] == (4, FIXED64)
    assert packed_varints(fields[4][2]) == [1, 300]


def test_a_message_protobuf_itself_encoded():
    descriptor_pb2 = pytest.importorskip('google.protobuf.descriptor_pb2')
    proto = descriptor_pb2.FieldDescriptorProto(name='label', number=-7, json_name='x' * 200)
    fields = {number: value for number, _, value in message_fields(proto.SerializeToString())}
    assert fields[1] == b'label' and int32(fields[3]) == -7 and fields[10] == b'x' * 200


@pytest.mark.parametrize('buf, message', [
    (varint(1 << 3 | VARINT) + b'\x80', 'truncated'),
    (varint(2 << 3 | LENGTH_DELIMITED) + varint(10) + b'abc', 'field 2 is truncated'),
    (varint(7 << 3 | 3), 'field 7 has the unsupported wire type 3'),
    (b'\xff' * 11, 'invalid varint'),
])
def test_malformed_messages_are_errors_naming_the_field(buf, message):
    with pytest.raises(ValueError, match=message):
        list(message_fields(buf))
