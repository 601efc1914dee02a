//! Avro binary encoding of vigil's record schemas (`pipeline.kafka.writers`: the same rules).
//!
//! A writer is compiled once from a fastavro-parsed record schema of the types the prepared
//! Python writers cover (`null` in unions, `boolean`, `int`, `long`, `timestamp-micros`,
//! `string`, `bytes`, records, arrays, unions of `null` and one type); any other schema gets
//! none. A value not written the plain way — a missing or extra field, another type, a naive
//! instant, a number out of range, a lone surrogate — raises, and the caller hands it to
//! fastavro, whose bytes or error stand.

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::GILOnceCell;
use pyo3::types::{
    PyBool, PyByteArray, PyBytes, PyDateAccess, PyDateTime, PyDelta, PyDeltaAccess, PyDict, PyInt,
    PyList, PyString, PyTimeAccess, PyTuple, PyTzInfoAccess,
};

pub(crate) enum Node {
    Boolean,
    Int,
    Long,
    Micros,
    Str,
    Bytes,
    Union { null_index: u8, other: Box<Node> },
    Record(Vec<(Py<PyString>, Node)>),
    Array(Box<Node>),
}

struct Unsupported;

fn scalar(schema: &Bound<'_, PyAny>) -> PyResult<Option<Node>> {
    let named = |name: &str| match name {
        "boolean" => Some(Node::Boolean),
        "int" => Some(Node::Int),
        "long" => Some(Node::Long),
        "string" => Some(Node::Str),
        "bytes" => Some(Node::Bytes),
        _ => None,
    };
    if let Ok(name) = schema.downcast::<PyString>() {
        return Ok(named(name.to_str()?));
    }
    let Ok(object) = schema.downcast::<PyDict>() else { return Ok(None) };
    let kind = object.get_item("type")?;
    let kind_text = kind.as_ref().and_then(|k| k.downcast::<PyString>().ok()).map(|k| k.to_string());
    if kind_text.as_deref() == Some("long") {
        let logical = object.get_item("logicalType")?;
        match logical {
            None => return Ok(Some(Node::Long)),
            Some(l) if l.is_none() => return Ok(Some(Node::Long)),
            Some(l) if l.downcast::<PyString>().is_ok_and(|s| s.to_str().ok() == Some("timestamp-micros")) => {
                return Ok(Some(Node::Micros))
            }
            _ => {}
        }
    }
    if let (Some(text), 1) = (kind_text, object.len()) {
        return Ok(named(&text));
    }
    Ok(None)
}

fn compile(schema: &Bound<'_, PyAny>) -> PyResult<Result<Node, Unsupported>> {
    if let Some(node) = scalar(schema)? {
        return Ok(Ok(node));
    }
    if let Ok(branches) = schema.downcast::<PyList>() {
        let is_null = |b: &Bound<'_, PyAny>| b.downcast::<PyString>().is_ok_and(|s| s.to_str().ok() == Some("null"));
        let items: Vec<_> = branches.iter().collect();
        if items.len() != 2 || !items.iter().any(is_null) {
            return Ok(Err(Unsupported));
        }
        let null_index = if is_null(&items[0]) { 0 } else { 1 };
        return Ok(compile(&items[1 - null_index])?.map(|other| Node::Union { null_index: null_index as u8, other: Box::new(other) }));
    }
    let Ok(object) = schema.downcast::<PyDict>() else { return Ok(Err(Unsupported)) };
    let kind: Option<String> = object.get_item("type")?.and_then(|k| k.extract().ok());
    match kind.as_deref() {
        Some("record") => {
            let Some(fields) = object.get_item("fields")? else { return Ok(Err(Unsupported)) };
            let mut compiled = Vec::new();
            for field in fields.try_iter()? {
                let field = field?;
                let name: String = field.get_item("name")?.extract()?;
                match compile(&field.get_item("type")?)? {
                    Ok(node) => compiled.push((PyString::intern(schema.py(), &name).unbind(), node)),
                    Err(u) => return Ok(Err(u)),
                }
            }
            Ok(Ok(Node::Record(compiled)))
        }
        Some("array") => {
            let Some(items) = object.get_item("items")? else { return Ok(Err(Unsupported)) };
            Ok(compile(&items)?.map(|node| Node::Array(Box::new(node))))
        }
        _ => Ok(Err(Unsupported)),
    }
}

fn refuse(what: &str) -> PyErr {
    PyTypeError::new_err(format!("not written the plain way: {what}"))
}

fn varint(out: &mut Vec<u8>, mut n: u64) {
    while n >= 0x80 {
        out.push((n as u8 & 0x7F) | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
}

fn zigzag(out: &mut Vec<u8>, n: i64) {
    varint(out, ((n << 1) ^ (n >> 63)) as u64);
}

fn exact_int(value: &Bound<'_, PyAny>) -> PyResult<i64> {
    if !value.is_exact_instance_of::<PyInt>() {
        return Err(refuse("not an int"));
    }
    value.extract::<i64>().map_err(|_| refuse("out of range"))
}

static UTC: GILOnceCell<PyObject> = GILOnceCell::new();

fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Whether `value`'s zone is `datetime.UTC` itself (what `pipeline.rules.instants.utc` keeps as
/// it is).
pub(crate) fn in_utc(value: &Bound<'_, PyDateTime>) -> PyResult<bool> {
    let py = value.py();
    let Some(zone) = value.get_tzinfo() else { return Ok(false) };
    let utc = UTC.get_or_try_init(py, || -> PyResult<PyObject> {
        Ok(py.import("datetime")?.getattr("UTC")?.unbind())
    })?;
    Ok(zone.is(utc.bind(py)))
}

/// `YYYY-MM-DDTHH:MM:SS[.ffffff]Z` of an instant already known to be in UTC
/// (`pipeline.rules.instants.rfc3339_micros`, or `rfc3339_seconds` without `micros`).
pub(crate) fn rfc3339(instant: &Bound<'_, PyDateTime>, micros: bool) -> String {
    let (y, mo, d) = (instant.get_year(), instant.get_month(), instant.get_day());
    let (h, mi, s) = (instant.get_hour(), instant.get_minute(), instant.get_second());
    if micros {
        format!("{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}.{:06}Z", instant.get_microsecond())
    } else {
        format!("{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}Z")
    }
}

/// `timestamp-micros` of an aware datetime (`pipeline.rules.instants.to_epoch_micros`).
pub(crate) fn epoch_micros(value: &Bound<'_, PyDateTime>) -> PyResult<i64> {
    let py = value.py();
    let Some(zone) = value.get_tzinfo() else { return Err(refuse("a naive instant")) };
    let utc = UTC.get_or_try_init(py, || -> PyResult<PyObject> {
        Ok(py.import("datetime")?.getattr("UTC")?.unbind())
    })?;
    let (mut offset_s, mut offset_us) = (0i64, 0i64);
    if !zone.is(utc.bind(py)) {
        let delta = value.call_method0("utcoffset")?;
        let delta = delta.downcast::<PyDelta>().map_err(|_| refuse("no UTC offset"))?;
        offset_s = delta.get_days() as i64 * 86_400 + delta.get_seconds() as i64;
        offset_us = delta.get_microseconds() as i64;
    }
    let days = days_from_civil(value.get_year() as i64, value.get_month() as i64, value.get_day() as i64);
    let seconds = days * 86_400
        + value.get_hour() as i64 * 3600
        + value.get_minute() as i64 * 60
        + value.get_second() as i64
        - offset_s;
    Ok(seconds * 1_000_000 + value.get_microsecond() as i64 - offset_us)
}

pub(crate) fn write(node: &Node, value: &Bound<'_, PyAny>, out: &mut Vec<u8>) -> PyResult<()> {
    match node {
        Node::Str => {
            let text = value.downcast_exact::<PyString>().map_err(|_| refuse("not a str"))?;
            let text = text.to_str().map_err(|_| refuse("not UTF-8"))?;
            zigzag(out, text.len() as i64);
            out.extend_from_slice(text.as_bytes());
        }
        Node::Long => zigzag(out, exact_int(value)?),
        Node::Micros => match value.downcast_exact::<PyDateTime>() {
            Ok(instant) => zigzag(out, epoch_micros(instant)?),
            Err(_) => zigzag(out, exact_int(value)?),
        },
        Node::Int => {
            let n = exact_int(value)?;
            if i32::try_from(n).is_err() {
                return Err(refuse("not an int"));
            }
            zigzag(out, n);
        }
        Node::Boolean => {
            let flag = value.downcast_exact::<PyBool>().map_err(|_| refuse("not a bool"))?;
            out.push(flag.is_true() as u8);
        }
        Node::Bytes => {
            let raw = value.downcast_exact::<PyBytes>().map_err(|_| refuse("not bytes"))?;
            let raw = raw.as_bytes();
            zigzag(out, raw.len() as i64);
            out.extend_from_slice(raw);
        }
        Node::Union { null_index, other } => {
            if value.is_none() {
                zigzag(out, *null_index as i64);
            } else {
                zigzag(out, 1 - *null_index as i64);
                write(other, value, out)?;
            }
        }
        Node::Record(fields) => write_record(fields, value, out)?,
        Node::Array(item) => {
            let items: Vec<Bound<'_, PyAny>> = if let Ok(list) = value.downcast_exact::<PyList>() {
                list.iter().collect()
            } else if let Ok(tuple) = value.downcast_exact::<PyTuple>() {
                tuple.iter().collect()
            } else {
                return Err(refuse("not a list"));
            };
            if !items.is_empty() {
                zigzag(out, items.len() as i64);
                for element in &items {
                    write(item, element, out)?;
                }
            }
            out.push(0);
        }
    }
    Ok(())
}

fn write_record(fields: &[(Py<PyString>, Node)], value: &Bound<'_, PyAny>, out: &mut Vec<u8>) -> PyResult<()> {
    let py = value.py();
    if let Ok(object) = value.downcast_exact::<PyDict>() {
        if object.len() != fields.len() {
            return Err(refuse("not exactly the fields of the schema"));
        }
        for (name, node) in fields {
            let found = object.get_item(name.bind(py))?.ok_or_else(|| refuse("a field is missing"))?;
            write(node, &found, out)?;
        }
        return Ok(());
    }
    if value.len()? != fields.len() {
        return Err(refuse("not exactly the fields of the schema"));
    }
    for (name, node) in fields {
        write(node, &value.get_item(name.bind(py))?, out)?;
    }
    Ok(())
}

// -- reading: the same compiled tree, fastavro's values (`AvroCodec.decode`) --------------------

/// Not read here: the caller hands the bytes to fastavro, whose value or error stands.
struct NotPlain;

impl From<PyErr> for NotPlain {
    fn from(_: PyErr) -> Self {
        NotPlain
    }
}

struct Cursor<'a> {
    data: &'a [u8],
    at: usize,
}

impl Cursor<'_> {
    fn byte(&mut self) -> Result<u8, NotPlain> {
        let b = *self.data.get(self.at).ok_or(NotPlain)?;
        self.at += 1;
        Ok(b)
    }

    /// A zigzag varint of at most 10 bytes that fits an i64 (anything else: fastavro's say).
    fn long(&mut self) -> Result<i64, NotPlain> {
        let mut n: u64 = 0;
        for shift in (0..64).step_by(7) {
            let b = self.byte()?;
            if shift == 63 && b > 1 {
                return Err(NotPlain);
            }
            n |= ((b & 0x7F) as u64) << shift;
            if b & 0x80 == 0 {
                return Ok(((n >> 1) as i64) ^ -((n & 1) as i64));
            }
        }
        Err(NotPlain)
    }

    fn take(&mut self) -> Result<&[u8], NotPlain> {
        let size = usize::try_from(self.long()?).map_err(|_| NotPlain)?;
        let end = self.at.checked_add(size).filter(|&e| e <= self.data.len()).ok_or(NotPlain)?;
        let out = &self.data[self.at..end];
        self.at = end;
        Ok(out)
    }
}

fn civil_from_days(z: i64) -> (i64, u8, u8) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u8;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u8;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

/// fastavro's `timestamp-micros`: the epoch (aware, UTC) plus the microseconds.
fn instant<'py>(py: Python<'py>, micros: i64) -> Result<Bound<'py, PyAny>, NotPlain> {
    let seconds = micros.div_euclid(1_000_000);
    let (days, rest) = (seconds.div_euclid(86_400), seconds.rem_euclid(86_400));
    let (year, month, day) = civil_from_days(days);
    if !(1..=9999).contains(&year) {
        return Err(NotPlain);
    }
    let utc = UTC.get_or_try_init(py, || -> PyResult<PyObject> { Ok(py.import("datetime")?.getattr("UTC")?.unbind()) })?;
    let zone = utc.bind(py).downcast::<pyo3::types::PyTzInfo>().map_err(|_| NotPlain)?;
    Ok(PyDateTime::new(
        py,
        year as i32,
        month,
        day,
        (rest / 3600) as u8,
        (rest % 3600 / 60) as u8,
        (rest % 60) as u8,
        micros.rem_euclid(1_000_000) as u32,
        Some(zone),
    )?
    .into_any())
}

fn read<'py>(py: Python<'py>, node: &Node, cursor: &mut Cursor<'_>) -> Result<Bound<'py, PyAny>, NotPlain> {
    Ok(match node {
        Node::Str => PyString::new(py, std::str::from_utf8(cursor.take()?).map_err(|_| NotPlain)?).into_any(),
        Node::Bytes => PyBytes::new(py, cursor.take()?).into_any(),
        Node::Long => cursor.long()?.into_pyobject(py).map_err(|_| NotPlain)?.into_any(),
        Node::Int => {
            let n = cursor.long()?;
            if i32::try_from(n).is_err() {
                return Err(NotPlain);
            }
            n.into_pyobject(py).map_err(|_| NotPlain)?.into_any()
        }
        Node::Micros => instant(py, cursor.long()?)?,
        Node::Boolean => match cursor.byte()? {
            0 => PyBool::new(py, false).to_owned().into_any(),
            1 => PyBool::new(py, true).to_owned().into_any(),
            _ => return Err(NotPlain),
        },
        Node::Union { null_index, other } => match cursor.long()? {
            i if i == *null_index as i64 => py.None().into_bound(py),
            i if i == 1 - *null_index as i64 => read(py, other, cursor)?,
            _ => return Err(NotPlain),
        },
        Node::Record(fields) => {
            let value = PyDict::new(py);
            for (name, field) in fields {
                value.set_item(name.bind(py), read(py, field, cursor)?)?;
            }
            value.into_any()
        }
        Node::Array(item) => {
            let items = PyList::empty(py);
            loop {
                let count = cursor.long()?;
                if count == 0 {
                    break;
                }
                if count.unsigned_abs() > (cursor.data.len() - cursor.at) as u64 {
                    return Err(NotPlain); // more items than bytes left: fastavro names it
                }
                if count < 0 {
                    cursor.long()?; // the block's byte size
                }
                for _ in 0..count.unsigned_abs() {
                    items.append(read(py, item, cursor)?)?;
                }
            }
            items.into_any()
        }
    })
}

/// A record schema's compiled writer; `header` (the single-object header) starts `encode`'s bytes.
#[pyclass(frozen, module = "vigil_native")]
pub(crate) struct Writer {
    pub(crate) root: Node,
    pub(crate) header: Vec<u8>,
}

#[pymethods]
impl Writer {
    /// Raises ValueError when the schema uses a type this module does not write.
    #[new]
    #[pyo3(signature = (parsed, header = b"".as_slice()))]
    fn new(parsed: &Bound<'_, PyAny>, header: &[u8]) -> PyResult<Self> {
        let is_record = parsed.downcast::<PyDict>().is_ok_and(|d| {
            d.get_item("type").ok().flatten().is_some_and(|t| t.extract::<String>().ok().as_deref() == Some("record"))
        });
        match (is_record, compile(parsed)?) {
            (true, Ok(root)) => Ok(Self { root, header: header.to_vec() }),
            _ => Err(PyValueError::new_err("no native writer for this schema")),
        }
    }

    /// Appends the body of `value` to `out` (the prepared Python writer's signature).
    fn __call__(&self, value: &Bound<'_, PyAny>, out: &Bound<'_, PyByteArray>) -> PyResult<()> {
        let mut body = Vec::with_capacity(256);
        write(&self.root, value, &mut body)?;
        let start = out.len();
        out.resize(start + body.len())?;
        // SAFETY: the GIL is held and no other reference to the buffer's memory is alive.
        unsafe { out.as_bytes_mut()[start..].copy_from_slice(&body) };
        Ok(())
    }

    /// The header, then the body of `value`.
    fn encode<'py>(&self, py: Python<'py>, value: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyBytes>> {
        let mut out = Vec::with_capacity(self.header.len() + 256);
        out.extend_from_slice(&self.header);
        write(&self.root, value, &mut out)?;
        Ok(PyBytes::new(py, &out))
    }

    /// The value fastavro reads from `data[offset:]` with this schema (no reader schema),
    /// which must end exactly at the end of `data`; None where fastavro should read it.
    fn read<'py>(&self, py: Python<'py>, data: &[u8], offset: usize) -> Option<Bound<'py, PyAny>> {
        let mut cursor = Cursor { data, at: offset };
        let value = read(py, &self.root, &mut cursor).ok()?;
        (cursor.at == data.len()).then_some(value)
    }

    /// `encode` of each value in one call; None where a value is not written the plain way.
    fn encode_many<'py>(&self, py: Python<'py>, values: &Bound<'py, PyAny>) -> PyResult<Vec<Option<Bound<'py, PyBytes>>>> {
        let mut answers = Vec::new();
        let mut out = Vec::with_capacity(1024);
        for value in values.try_iter()? {
            out.clear();
            out.extend_from_slice(&self.header);
            answers.push(match write(&self.root, &value?, &mut out) {
                Ok(()) => Some(PyBytes::new(py, &out)),
                Err(_) => None,
            });
        }
        Ok(answers)
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Writer>()?;
    Ok(())
}
