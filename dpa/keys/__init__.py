"""Keys: the canonical byte encoding of a key and its MurmurHash3.

* :mod:`dpa.keys.encoding` — one key (a value or a tuple) to canonical bytes and its hash;
* :mod:`dpa.keys.columns` — whole Arrow key columns encoded and hashed at once;
* :mod:`dpa.keys.types` — encodings of dates, times, timestamps, durations and decimals;
* :mod:`dpa.keys.murmur3` — MurmurHash3 x86_32 vectorised with numpy.
"""
