//! One sealed field (`pipeline.crypto.envelope`): version byte 0x01, the 16-byte key id, a
//! 12-byte random nonce, then AES-256-GCM ciphertext and tag, the record's identity as
//! associated data. Keys come from the Python key ring; nothing here stores or prints them.

use aes_gcm::aead::{Aead, KeyInit, Payload};
use aes_gcm::{Aes256Gcm, Nonce};
use pyo3::exceptions::{PyOSError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyBytes;

const VERSION: u8 = 1;
const KEY_ID: usize = 16;
pub(crate) const NONCE: usize = 12;
const TAG: usize = 16;
const HEAD: usize = 1 + KEY_ID;

/// One data key's AES-256-GCM context.
#[pyclass(frozen, module = "vigil_native")]
pub(crate) struct Cipher {
    aead: Aes256Gcm,
    key_id: [u8; KEY_ID],
}

pub(crate) fn sealed(cipher: &Cipher, plaintext: &[u8], aad: &[u8], nonce: [u8; NONCE]) -> PyResult<Vec<u8>> {
    let body = cipher
        .aead
        .encrypt(Nonce::from_slice(&nonce), Payload { msg: plaintext, aad })
        .map_err(|_| PyValueError::new_err("AES-GCM refused the plaintext"))?;
    let mut out = Vec::with_capacity(HEAD + NONCE + body.len());
    out.push(VERSION);
    out.extend_from_slice(&cipher.key_id);
    out.extend_from_slice(&nonce);
    out.extend_from_slice(&body);
    Ok(out)
}

#[pymethods]
impl Cipher {
    #[new]
    fn new(key: &[u8], key_id: &[u8]) -> PyResult<Self> {
        let aead = Aes256Gcm::new_from_slice(key).map_err(|_| PyValueError::new_err("a data key is 32 bytes"))?;
        let key_id = key_id.try_into().map_err(|_| PyValueError::new_err("a key id is 16 bytes"))?;
        Ok(Self { aead, key_id })
    }

    /// The sealed value of `plaintext` bound to `aad`; `nonce` only for tests (else random).
    #[pyo3(signature = (plaintext, aad, nonce = None))]
    fn seal<'py>(&self, py: Python<'py>, plaintext: &[u8], aad: &[u8], nonce: Option<&[u8]>) -> PyResult<Bound<'py, PyBytes>> {
        let nonce = match nonce {
            Some(given) => given.try_into().map_err(|_| PyValueError::new_err("a nonce is 12 bytes"))?,
            None => {
                let mut fresh = [0u8; NONCE];
                getrandom::getrandom(&mut fresh).map_err(|e| PyOSError::new_err(e.to_string()))?;
                fresh
            }
        };
        Ok(PyBytes::new(py, &sealed(self, plaintext, aad, nonce)?))
    }

    /// The plaintext, or None when `value` is not authentic for `aad` under this key.
    fn open<'py>(&self, py: Python<'py>, value: &[u8], aad: &[u8]) -> Option<Bound<'py, PyBytes>> {
        if value.len() < HEAD + NONCE + TAG || value[0] != VERSION || value[1..HEAD] != self.key_id {
            return None;
        }
        let nonce = Nonce::from_slice(&value[HEAD..HEAD + NONCE]);
        let plain = self.aead.decrypt(nonce, Payload { msg: &value[HEAD + NONCE..], aad }).ok()?;
        Some(PyBytes::new(py, &plain))
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Cipher>()?;
    Ok(())
}
