"""Ask a broker which Kafka release it runs, through the admin protocol.

Kafka reports its release as the finalized `metadata.version` feature level in the ApiVersions
response (v3+, the call behind `Admin.describeFeatures()` and `kafka-features.sh describe`).
aiokafka only speaks ApiVersions v0-v2, so this module sends the v3 request itself and decodes
the reply with aiokafka's protocol types.
"""

from __future__ import annotations

import asyncio
import struct
from io import BytesIO

from aiokafka.protocol.types import (
    CompactArray,
    CompactString,
    Int16,
    Int32,
    Schema,
    TaggedFields,
    UnsignedVarInt32,
)

__all__ = ["METADATA_VERSIONS", "describe_features", "kafka_release"]

# metadata.version feature levels of the Kafka releases we may meet (MetadataVersion.java).
METADATA_VERSIONS: dict[int, str] = {
    21: "3.9-IV0",
    22: "4.0-IV0",
    23: "4.0-IV1",
    24: "4.0-IV2",
    25: "4.0-IV3",
    26: "4.1-IV0",
    27: "4.1-IV1",
}

_API_VERSIONS = 18
_FINALIZED_FEATURES_TAG = 2
_FEATURE = Schema(
    ("name", CompactString("utf-8")),
    ("max_version_level", Int16),
    ("min_version_level", Int16),
    ("tags", TaggedFields),
)


async def describe_features(host: str, port: int, timeout: float = 10.0) -> dict[str, int]:
    """Finalized feature levels (`{"metadata.version": 25, ...}`) of the broker at host:port."""
    client_id = b"omstream"
    header = struct.pack(">hhih", _API_VERSIONS, 3, 1, len(client_id)) + client_id + b"\x00"
    body = CompactString("utf-8").encode("omstream") + CompactString("utf-8").encode("0") + b"\x00"
    payload = header + body
    reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
    try:
        writer.write(struct.pack(">i", len(payload)) + payload)
        await writer.drain()
        size = struct.unpack(">i", await asyncio.wait_for(reader.readexactly(4), timeout))[0]
        data = BytesIO(await asyncio.wait_for(reader.readexactly(size), timeout))
    finally:
        writer.close()
    # ApiVersions keeps response header v0 (no tagged fields) even in its flexible versions.
    Int32.decode(data)  # correlation id
    error_code = Int16.decode(data)
    if error_code:
        raise RuntimeError(f"ApiVersions v3 failed with error code {error_code}")
    CompactArray(("api_key", Int16), ("min", Int16), ("max", Int16), ("tags", TaggedFields)).decode(data)
    Int32.decode(data)  # throttle time
    tags = TaggedFields.decode(data)
    raw = tags.get(_FINALIZED_FEATURES_TAG)
    if raw is None:
        return {}
    buf = BytesIO(raw)
    count = UnsignedVarInt32.decode(buf) - 1
    features = [_FEATURE.decode(buf) for _ in range(max(count, 0))]
    return {name: max_level for name, max_level, _min, _tags in features}


async def kafka_release(bootstrap: str) -> str:
    """The release line the broker reports, e.g. `4.0-IV3`."""
    host, port = bootstrap.rsplit(":", 1)
    level = (await describe_features(host, int(port))).get("metadata.version")
    if level is None:
        raise RuntimeError("the broker reported no finalized metadata.version")
    return METADATA_VERSIONS.get(level, f"unknown metadata.version level {level}")
