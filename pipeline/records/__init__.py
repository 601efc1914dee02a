"""Records on the wire: one module per ``schemas/*.avsc`` record type, mapping the rules'
models to and from their Avro values. Imports only the rules; the bytes framing is done by a
:class:`~pipeline.records.codec.Codec` passed in (the Kafka layer's ``AvroCodec``).
"""
