//! JSON text read into Python values, as `json.loads` reads it, for the plain subset only
//! (`pipeline.rules.bounds.parse_json` is the specification and the fallback).
//!
//! Hand-written rather than serde_json: the values must be CPython's own (`dict` with the first
//! position of a repeated key and the last value, exact `int` and `float`), and everything
//! outside the subset must come back as "not here" so that Python decides — a library parser
//! would decide refusals of its own. The subset: strings without control characters or
//! surrogate escapes, integers of at most 15 digits (below 2^53: within every bound), numbers
//! without an exponent or a 16-digit run, nesting within `max_depth`, at most `max_nodes`
//! values. Anything else, and any text that is not JSON, is None: the Python path reads it
//! or names the refusal.

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyFloat, PyList, PyString, PyTuple};

/// Not read here: the Python path reads it (or refuses it).
struct Elsewhere;

impl From<PyErr> for Elsewhere {
    fn from(_: PyErr) -> Self {
        Elsewhere
    }
}

impl From<std::convert::Infallible> for Elsewhere {
    fn from(never: std::convert::Infallible) -> Self {
        match never {}
    }
}

type Read<T> = Result<T, Elsewhere>;

struct Parser<'py, 's> {
    py: Python<'py>,
    text: &'s [u8],
    at: usize,
    max_depth: usize,
    nodes: usize,
    max_nodes: usize,
    scratch: String,
}

impl<'py> Parser<'py, '_> {
    fn skip_space(&mut self) {
        while let Some(&b) = self.text.get(self.at) {
            if b == b' ' || b == b'\t' || b == b'\n' || b == b'\r' {
                self.at += 1;
            } else {
                break;
            }
        }
    }

    fn peek(&self) -> Read<u8> {
        self.text.get(self.at).copied().ok_or(Elsewhere)
    }

    fn expect(&mut self, word: &[u8]) -> Read<()> {
        if self.text.get(self.at..self.at + word.len()) == Some(word) {
            self.at += word.len();
            Ok(())
        } else {
            Err(Elsewhere)
        }
    }

    fn value(&mut self, depth: usize) -> Read<Bound<'py, PyAny>> {
        self.nodes += 1;
        if self.nodes > self.max_nodes {
            return Err(Elsewhere);
        }
        let py = self.py;
        match self.peek()? {
            b'{' => self.object(depth + 1),
            b'[' => self.array(depth + 1),
            b'"' => Ok(self.string()?.into_any()),
            b't' => {
                self.expect(b"true")?;
                Ok(true.into_pyobject(py)?.to_owned().into_any())
            }
            b'f' => {
                self.expect(b"false")?;
                Ok(false.into_pyobject(py)?.to_owned().into_any())
            }
            b'n' => {
                self.expect(b"null")?;
                Ok(py.None().into_bound(py))
            }
            _ => self.number(),
        }
    }

    /// Past a container's opening bracket; true when it closes at once (empty).
    fn open(&mut self, depth: usize, close: u8) -> Read<bool> {
        if depth > self.max_depth {
            return Err(Elsewhere);
        }
        self.at += 1;
        self.skip_space();
        let empty = self.peek()? == close;
        if empty {
            self.at += 1;
        }
        Ok(empty)
    }

    /// Past the separator after a member; true when that was the container's close.
    fn closed(&mut self, close: u8) -> Read<bool> {
        self.skip_space();
        let next = self.peek()?;
        self.at += 1;
        match next {
            b',' => Ok(false),
            _ if next == close => Ok(true),
            _ => Err(Elsewhere),
        }
    }

    fn object(&mut self, depth: usize) -> Read<Bound<'py, PyAny>> {
        let dict = PyDict::new(self.py);
        if self.open(depth, b'}')? {
            return Ok(dict.into_any());
        }
        loop {
            self.skip_space();
            if self.peek()? != b'"' {
                return Err(Elsewhere);
            }
            let key = self.string()?;
            self.skip_space();
            if self.peek()? != b':' {
                return Err(Elsewhere);
            }
            self.at += 1;
            self.skip_space();
            let value = self.value(depth)?;
            dict.set_item(key, value)?; // a repeated key: its first place, its last value
            if self.closed(b'}')? {
                return Ok(dict.into_any());
            }
        }
    }

    fn array(&mut self, depth: usize) -> Read<Bound<'py, PyAny>> {
        let list = PyList::empty(self.py);
        if self.open(depth, b']')? {
            return Ok(list.into_any());
        }
        loop {
            self.skip_space();
            list.append(self.value(depth)?)?;
            if self.closed(b']')? {
                return Ok(list.into_any());
            }
        }
    }

    fn string(&mut self) -> Read<Bound<'py, PyString>> {
        self.at += 1; // '"'
        let start = self.at;
        loop {
            let b = self.peek()?;
            match b {
                b'"' => {
                    let plain = std::str::from_utf8(&self.text[start..self.at]).map_err(|_| Elsewhere)?;
                    self.at += 1;
                    return Ok(PyString::new(self.py, plain));
                }
                b'\\' => break,
                0..=0x1f => return Err(Elsewhere), // json.loads refuses a raw control character
                _ => self.at += 1,
            }
        }
        let mut out = std::mem::take(&mut self.scratch);
        out.clear();
        out.push_str(std::str::from_utf8(&self.text[start..self.at]).map_err(|_| Elsewhere)?);
        let read = self.escaped(&mut out);
        let answer = read.map(|()| PyString::new(self.py, &out));
        self.scratch = out;
        answer
    }

    /// The rest of a string that holds an escape, from its first backslash.
    fn escaped(&mut self, out: &mut String) -> Read<()> {
        loop {
            let run = self.at;
            while let Some(&b) = self.text.get(self.at) {
                if b == b'"' || b == b'\\' || b < 0x20 {
                    break;
                }
                self.at += 1;
            }
            out.push_str(std::str::from_utf8(&self.text[run..self.at]).map_err(|_| Elsewhere)?);
            match self.peek()? {
                b'"' => {
                    self.at += 1;
                    return Ok(());
                }
                b'\\' => {
                    let escape = *self.text.get(self.at + 1).ok_or(Elsewhere)?;
                    self.at += 2;
                    out.push(match escape {
                        b'"' => '"',
                        b'\\' => '\\',
                        b'/' => '/',
                        b'b' => '\u{8}',
                        b'f' => '\u{c}',
                        b'n' => '\n',
                        b'r' => '\r',
                        b't' => '\t',
                        b'u' => {
                            let hex = self.text.get(self.at..self.at + 4).ok_or(Elsewhere)?;
                            let hex = std::str::from_utf8(hex).map_err(|_| Elsewhere)?;
                            if !hex.bytes().all(|h| h.is_ascii_hexdigit()) {
                                return Err(Elsewhere);
                            }
                            let unit = u32::from_str_radix(hex, 16).map_err(|_| Elsewhere)?;
                            self.at += 4;
                            // a surrogate (paired or lone) is left to json.loads's own rules
                            char::from_u32(unit).ok_or(Elsewhere)?
                        }
                        _ => return Err(Elsewhere),
                    });
                }
                _ => return Err(Elsewhere), // a raw control character
            }
        }
    }

    fn number(&mut self) -> Read<Bound<'py, PyAny>> {
        let start = self.at;
        let digits = |p: &mut Self| {
            let from = p.at;
            while p.text.get(p.at).is_some_and(u8::is_ascii_digit) {
                p.at += 1;
            }
            p.at - from
        };
        if self.text.get(self.at) == Some(&b'-') {
            self.at += 1;
        }
        let whole = digits(self);
        let lead = self.text.get(self.at - whole).copied();
        if whole == 0 || whole > 15 || (whole > 1 && lead == Some(b'0')) {
            return Err(Elsewhere);
        }
        let mut float = false;
        if self.text.get(self.at) == Some(&b'.') {
            self.at += 1;
            let fraction = digits(self);
            if fraction == 0 || fraction > 15 {
                return Err(Elsewhere);
            }
            float = true;
        }
        if matches!(self.text.get(self.at), Some(b'e' | b'E')) {
            return Err(Elsewhere); // an exponent may overflow: the bounded decoder's
        }
        let text = std::str::from_utf8(&self.text[start..self.at]).map_err(|_| Elsewhere)?;
        if float {
            let value: f64 = text.parse().map_err(|_| Elsewhere)?;
            Ok(PyFloat::new(self.py, value).into_any())
        } else {
            let value: i64 = text.parse().map_err(|_| Elsewhere)?;
            Ok(value.into_pyobject(self.py)?.into_any())
        }
    }
}

/// The value of JSON text in the plain subset (as `json.loads` reads it), else None.
pub(crate) fn read<'py>(py: Python<'py>, text: &str, max_depth: usize, max_nodes: usize) -> Option<Bound<'py, PyAny>> {
    let mut parser = Parser { py, text: text.as_bytes(), at: 0, max_depth, nodes: 0, max_nodes, scratch: String::new() };
    parser.skip_space();
    let value = parser.value(0).ok()?;
    parser.skip_space();
    (parser.at == parser.text.len()).then_some(value)
}

/// `(value,)` for JSON text in the plain subset (as `json.loads` reads it), else None.
#[pyfunction]
#[pyo3(signature = (text, max_depth, max_nodes))]
fn parse_json<'py>(py: Python<'py>, text: &Bound<'py, PyString>, max_depth: usize, max_nodes: usize) -> PyResult<Option<Bound<'py, PyTuple>>> {
    let Ok(text) = text.to_str() else { return Ok(None) }; // a lone surrogate: not UTF-8
    match read(py, text, max_depth, max_nodes) {
        Some(value) => Ok(Some(PyTuple::new(py, [value])?)),
        None => Ok(None),
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(parse_json, m)?)?;
    Ok(())
}
