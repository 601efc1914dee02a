//! The condition DSL over a compiled condition (`pipeline.rules.condition`: its module
//! docstring is the rule book, `interpret` the reference).
//!
//! Built from the JSON shape `condition_to_json` gives (already parsed and bounded by the
//! Python rules), and evaluated over the payload as `json.loads` made it, with CPython's own
//! comparisons: a value's kind is its exact type (`bool` is never a number, a `str` subclass
//! is not a string), ints and floats compare as Python compares them (exactly, any size),
//! strings by code point. A path that does not resolve makes every comparison false.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::pyclass::CompareOp;
use pyo3::sync::GILOnceCell;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple, PyType};

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    String,
    Number,
    Boolean,
    Null,
}

fn kind_of(value: &Bound<'_, PyAny>) -> Option<Kind> {
    if value.is_exact_instance_of::<PyString>() {
        Some(Kind::String)
    } else if value.is_exact_instance_of::<PyInt>() || value.is_exact_instance_of::<PyFloat>() {
        Some(Kind::Number)
    } else if value.is_exact_instance_of::<PyBool>() {
        Some(Kind::Boolean)
    } else if value.is_none() {
        Some(Kind::Null)
    } else {
        None
    }
}

enum Node {
    Compare { op: CompareOp, path: Vec<Py<PyString>>, literal: PyObject, kind: Kind },
    Contains { path: Vec<Py<PyString>>, needle: Py<PyString> },
    Exists { path: Vec<Py<PyString>> },
    All(Vec<Node>),
    Any(Vec<Node>),
    Not(Box<Node>),
}

fn shape_error(what: &str) -> PyErr {
    PyValueError::new_err(format!("not a condition's JSON shape: {what}"))
}

fn path_of(raw: &Bound<'_, PyAny>) -> PyResult<Vec<Py<PyString>>> {
    let text: String = raw.extract().map_err(|_| shape_error("a path is a string"))?;
    let py = raw.py();
    Ok(text.split('.').map(|s| PyString::intern(py, s).unbind()).collect())
}

fn pair<'py>(arg: &Bound<'py, PyAny>) -> PyResult<(Bound<'py, PyAny>, Bound<'py, PyAny>)> {
    let items: Vec<Bound<'py, PyAny>> = if let Ok(list) = arg.downcast::<PyList>() {
        list.iter().collect()
    } else if let Ok(tuple) = arg.downcast::<PyTuple>() {
        tuple.iter().collect()
    } else {
        return Err(shape_error("takes [path, literal]"));
    };
    match <[Bound<'py, PyAny>; 2]>::try_from(items) {
        Ok([path, literal]) => Ok((path, literal)),
        Err(_) => Err(shape_error("takes [path, literal]")),
    }
}

fn children(arg: &Bound<'_, PyAny>, depth: usize) -> PyResult<Vec<Node>> {
    let mut nodes = Vec::new();
    for child in arg.try_iter()? {
        nodes.push(build(&child?, depth + 1)?);
    }
    if nodes.is_empty() {
        return Err(shape_error("all/any take at least one condition"));
    }
    Ok(nodes)
}

fn build(raw: &Bound<'_, PyAny>, depth: usize) -> PyResult<Node> {
    if depth > 64 {
        return Err(shape_error("nested too deeply"));
    }
    let object = raw.downcast::<PyDict>().map_err(|_| shape_error("an object"))?;
    if object.len() != 1 {
        return Err(shape_error("exactly one operator"));
    }
    let (name, arg) = object.iter().next().expect("one item");
    let name: String = name.extract()?;
    let op = match name.as_str() {
        "all" => return Ok(Node::All(children(&arg, depth)?)),
        "any" => return Ok(Node::Any(children(&arg, depth)?)),
        "not" => return Ok(Node::Not(Box::new(build(&arg, depth + 1)?))),
        "exists" => return Ok(Node::Exists { path: path_of(&arg)? }),
        "contains" => {
            let (path, needle) = pair(&arg)?;
            let needle = needle.downcast_exact::<PyString>().map_err(|_| shape_error("contains takes a string"))?;
            return Ok(Node::Contains { path: path_of(&path)?, needle: needle.clone().unbind() });
        }
        "eq" => CompareOp::Eq,
        "ne" => CompareOp::Ne,
        "lt" => CompareOp::Lt,
        "le" => CompareOp::Le,
        "gt" => CompareOp::Gt,
        "ge" => CompareOp::Ge,
        _ => return Err(shape_error("unknown operator")),
    };
    let (path, literal) = pair(&arg)?;
    let kind = kind_of(&literal).ok_or_else(|| shape_error("a literal is a scalar"))?;
    let ordering = !matches!(op, CompareOp::Eq | CompareOp::Ne);
    if ordering && !matches!(kind, Kind::String | Kind::Number) {
        return Err(shape_error("an ordering compares numbers or strings"));
    }
    Ok(Node::Compare { op, path: path_of(&path)?, literal: literal.unbind(), kind })
}

static MAPPING: GILOnceCell<Py<PyType>> = GILOnceCell::new();

fn is_mapping(value: &Bound<'_, PyAny>) -> PyResult<bool> {
    let py = value.py();
    let mapping = MAPPING.import(py, "collections.abc", "Mapping")?;
    value.is_instance(mapping)
}

/// The value at `path`, None when a segment is absent or its parent is not an object
/// (`pipeline.rules.paths.resolve`).
fn resolve<'py>(payload: &Bound<'py, PyAny>, path: &[Py<PyString>]) -> PyResult<Option<Bound<'py, PyAny>>> {
    let py = payload.py();
    let mut value = payload.clone();
    for segment in path {
        let segment = segment.bind(py);
        if let Ok(object) = value.downcast_exact::<PyDict>() {
            match object.get_item(segment)? {
                Some(found) => value = found,
                None => return Ok(None),
            }
        } else if is_mapping(&value)? {
            let missing = PyTuple::empty(py); // a fresh sentinel nothing in a payload is
            let found = value.call_method1("get", (segment, &missing))?;
            if found.is(&missing) {
                return Ok(None);
            }
            value = found;
        } else {
            return Ok(None);
        }
    }
    Ok(Some(value))
}

fn equal(value: &Bound<'_, PyAny>, literal: &Bound<'_, PyAny>, kind: Kind) -> PyResult<bool> {
    if kind_of(value) != Some(kind) {
        return Ok(false);
    }
    match kind {
        Kind::Boolean | Kind::Null => Ok(value.is(literal)),
        Kind::String | Kind::Number => value.eq(literal),
    }
}

fn holds(node: &Node, payload: &Bound<'_, PyAny>) -> PyResult<bool> {
    let py = payload.py();
    match node {
        Node::Compare { op, path, literal, kind } => {
            let Some(value) = resolve(payload, path)? else { return Ok(false) };
            let literal = literal.bind(py);
            match op {
                CompareOp::Eq => equal(&value, literal, *kind),
                CompareOp::Ne => Ok(!equal(&value, literal, *kind)?),
                _ if kind_of(&value) != Some(*kind) => Ok(false),
                _ => value.rich_compare(literal, *op)?.is_truthy(),
            }
        }
        Node::Contains { path, needle } => match resolve(payload, path)? {
            Some(value) if value.is_exact_instance_of::<PyString>() => value.contains(needle.bind(py)),
            _ => Ok(false),
        },
        Node::Exists { path } => Ok(resolve(payload, path)?.is_some()),
        Node::All(nodes) => {
            for child in nodes {
                if !holds(child, payload)? {
                    return Ok(false);
                }
            }
            Ok(true)
        }
        Node::Any(nodes) => {
            for child in nodes {
                if holds(child, payload)? {
                    return Ok(true);
                }
            }
            Ok(false)
        }
        Node::Not(child) => Ok(!holds(child, payload)?),
    }
}

/// A condition compiled once per definition version; calling it with a payload answers as
/// `interpret(condition, payload)` does.
#[pyclass(frozen, module = "vigil_native")]
struct Condition {
    root: Node,
}

#[pymethods]
impl Condition {
    #[new]
    fn new(shape: &Bound<'_, PyAny>) -> PyResult<Self> {
        Ok(Self { root: build(shape, 1)? })
    }

    fn __call__(&self, payload: &Bound<'_, PyAny>) -> PyResult<bool> {
        holds(&self.root, payload)
    }
}

/// Fan-out in one call: for each condition, whether it holds for
/// `payload` — the watchers of one (source, event type) against one event.
#[pyfunction]
fn holds_each(conditions: &Bound<'_, PyAny>, payload: &Bound<'_, PyAny>) -> PyResult<Vec<bool>> {
    let mut answers = Vec::new();
    for item in conditions.try_iter()? {
        let item = item?;
        let condition = item.downcast::<Condition>()?;
        answers.push(holds(&condition.get().root, payload)?);
    }
    Ok(answers)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Condition>()?;
    m.add_function(wrap_pyfunction!(holds_each, m)?)?;
    Ok(())
}
