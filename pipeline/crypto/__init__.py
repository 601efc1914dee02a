"""Crypto-shredding: per-subject data keys, wrapped by the operator's key-encryption keys, and the
AEAD of subject fields (DESIGN §7, §10 "Erasure's reach").

``kek`` holds the key-encryption keys, ``envelope`` one sealed field, ``ring`` the data keys a
process knows; a tombstoned key opens nothing anywhere, and no key is ever logged. Leaves out
reading ``keys`` (``pipeline.runtime``) and which fields are sealed (``pipeline.records``).
"""

from pipeline.crypto.kek import KeyEncryptionKeys, generate_kek_text
from pipeline.crypto.ring import KeyRing

__all__ = ["KeyEncryptionKeys", "KeyRing", "generate_kek_text"]
