"""Crypto-shredding: per-subject data keys, wrapped by the operator's key-encryption keys, and
the AEAD of subject fields (DESIGN §7, §10 "Erasure's reach").

- :mod:`~pipeline.crypto.kek`: the operator's key-encryption keys (``[privacy]
  master_key_env``, several by id; new wraps use the newest), wrapping and unwrapping data keys.
- :mod:`~pipeline.crypto.envelope`: one sealed field — AES-256-GCM under a data key, the
  record's identity as associated data, the key's id in front.
- :mod:`~pipeline.crypto.ring`: :class:`~pipeline.crypto.ring.KeyRing`, the data keys a process
  knows (fed from the compacted ``keys`` topic), a bounded cache of unwrapped keys, and the
  ``Sealer`` that record modules seal and open through.

Erasure tombstones the keys: from then on nothing sealed under them opens anywhere, whatever
the logs still hold. No key — data key or key-encryption key — is ever logged or printed.

Leaves out reading the ``keys`` topic (``pipeline.runtime``) and which records seal which
fields under which key (``pipeline.records``, ``pipeline.rules.data_keys``).
"""

from pipeline.crypto.kek import KeyEncryptionKeys, generate_kek_text
from pipeline.crypto.ring import KeyRing

__all__ = ["KeyEncryptionKeys", "KeyRing", "generate_kek_text"]
