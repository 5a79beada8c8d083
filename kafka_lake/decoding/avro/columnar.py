"""The columnar path: the payloads of one schema version spliced into Avro blocks, decoded by a native reader
straight to Arrow, checked record by record against what fastavro would read, and placed as columns.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from kafka_lake.decoding.avro.columnar_mapping import ColumnarMapping
from kafka_lake.decoding.avro.records import UNFIT_FOR_ARROW
from kafka_lake.decoding.avro.spliced_blocks import SplicedPayloads, container_header, decode_block_isolating
from kafka_lake.decoding.decoded_batch import Placement
from kafka_lake.decoding.placement import TimePlacement, place_by_hour
from kafka_lake.kafka.framing import FramedValues
from kafka_lake.kafka.records import KafkaBatch, KafkaColumns


class AvroColumns:
    """The columnar path of one schema version, compiled to `columnar` (see `columnar_mapping_for`)."""

    def __init__(self, version: int, columnar: ColumnarMapping, placement: TimePlacement):
        self._version = version
        self._columnar = columnar
        self._header = container_header(columnar.block_schema)
        self._placement = placement

    def decode(self, framed: FramedValues, indices: np.ndarray, batch: KafkaBatch, kafka: KafkaColumns,
               placed: dict[Placement, list[pa.Table]]) -> list[int]:
        """Lands what the columnar path vouches for of the batch's records at `indices` in `placed`; returns the
        records left for the record path."""
        columnar = self._columnar
        left: list[int] = []
        block = SplicedPayloads(framed, indices)
        for part, decoded, starts, lengths in decode_block_isolating(self._header, columnar, block, left):
            hours, unplaced = self._placement.hours_of_columns(decoded, batch.timestamps_ms, part)
            refused = columnar.misfits(decoded) | unplaced
            misread = columnar.misread_branches(decoded, block.data, starts, lengths)
            keep = ~(refused if misread is None else refused | misread)
            if not keep.all():
                left.extend(part[~keep])
                part, hours = part[keep], hours[keep]
                decoded = decoded.filter(pa.array(keep))
            if not len(part):
                continue
            try:
                columns = columnar.record_columns(decoded) + kafka.take(part)
                table = pa.Table.from_arrays(columns, schema=columnar.schema)
            except UNFIT_FOR_ARROW:  # not expected: the record path then decides, record by record
                left.extend(part)
                continue
            place_by_hour(placed, self._version, table, hours)
        return left


