//! The values a pickle builds, in an arena: one node a value, so that the
//! memo, the stack and containers share nodes as Python shares objects
//! (a dictionary put in the memo and then filled is the same dictionary
//! wherever it is fetched).

use alloc::boxed::Box;
use alloc::string::String;
use alloc::vec::Vec;

use crate::Dtype;

/// A node's index in the [`Arena`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Id(pub(crate) u32);

/// A storage a persistent id names: torch's `("storage", class, key,
/// location, numel)`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StorageRef {
    /// The key: the storage is the zip member `<archive>/data/<key>`.
    pub key: Box<str>,
    /// The element type of a typed storage (`torch.FloatStorage`); `None`
    /// for an untyped one (`torch.UntypedStorage`), whose `numel` counts
    /// bytes.
    pub dtype: Option<Dtype>,
    /// Elements (bytes for an untyped storage).
    pub numel: u64,
    /// Where it was saved from (`cpu`, `cuda:0`): informative only.
    pub location: Box<str>,
}

impl StorageRef {
    /// The storage's length in bytes (`None` on overflow).
    pub fn nbytes(&self) -> Option<u64> {
        match self.dtype {
            None => Some(self.numel),
            Some(d) => self.numel.checked_mul(d.names().byte_width()?),
        }
    }
}

/// A tensor: a view of a storage (offset and strides in elements).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorRef {
    /// The storage's node.
    pub storage: Id,
    /// The element type.
    pub dtype: Dtype,
    /// The first element's index in the storage, in elements.
    pub offset: u64,
    /// The shape.
    pub shape: Vec<u64>,
    /// The strides, in elements.
    pub stride: Vec<u64>,
}

/// A name a `GLOBAL` (or `STACK_GLOBAL`, `INST`) referred to, of the allow
/// list (docs/PICKLE.md): nothing is imported, the name is only matched.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Global {
    /// `torch._utils._rebuild_tensor_v2`.
    RebuildTensorV2,
    /// `torch._utils._rebuild_tensor_v3`.
    RebuildTensorV3,
    /// `torch._utils._rebuild_tensor`.
    RebuildTensor,
    /// `torch._utils._rebuild_parameter`.
    RebuildParameter,
    /// `torch._utils._rebuild_parameter_with_state`.
    RebuildParameterWithState,
    /// A storage class (`torch.FloatStorage`: `Some(F32)`;
    /// `torch.UntypedStorage`: `None`).
    StorageClass(Option<Dtype>),
    /// A dtype (`torch.float32`).
    Dtype(Dtype),
    /// `collections.OrderedDict`.
    OrderedDict,
    /// `torch.Size`.
    Size,
    /// `torch.device`.
    Device,
    /// `builtins.set`.
    Set,
    /// `builtins.frozenset`.
    FrozenSet,
    /// `_codecs.encode`.
    CodecsEncode,
    /// `builtins.bytearray`.
    ByteArray,
}

/// One value.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    /// `None`.
    None,
    /// A boolean.
    Bool(bool),
    /// An integer (64 bits at most).
    Int(i64),
    /// A float.
    Float(f64),
    /// A string.
    Str(Box<str>),
    /// Bytes.
    Bytes(Vec<u8>),
    /// A list.
    List(Vec<Id>),
    /// A tuple.
    Tuple(Vec<Id>),
    /// A dictionary, in insertion order (a key set twice keeps its first
    /// place and its last value, as Python's), and the attributes a
    /// `BUILD` gave it (an `OrderedDict` subclass's `__dict__`).
    Dict(Vec<(Id, Id)>, Vec<(Id, Id)>),
    /// A set or frozenset.
    Set(Vec<Id>),
    /// A name of the allow list.
    Global(Global),
    /// A name outside the allow list, kept only when scanning.
    Foreign(Box<str>),
    /// What a call of a foreign name would have made, when scanning.
    Called(Box<str>),
    /// A storage.
    Storage(StorageRef),
    /// A tensor.
    Tensor(TensorRef),
    /// A dtype given as a value.
    Dtype(Dtype),
    /// The mark on the stack (never stored in a container).
    Mark,
}

/// The nodes of one pickle.
#[derive(Debug, Default)]
pub struct Arena {
    nodes: Vec<Value>,
}

impl Arena {
    pub(crate) fn push(&mut self, v: Value) -> Id {
        self.nodes.push(v);
        Id(u32::try_from(self.nodes.len() - 1).unwrap_or(u32::MAX))
    }

    /// The value of node `id` (`None` for an id of another arena).
    pub fn get(&self, id: Id) -> Option<&Value> {
        self.nodes.get(id.0 as usize)
    }

    pub(crate) fn get_mut(&mut self, id: Id) -> Option<&mut Value> {
        self.nodes.get_mut(id.0 as usize)
    }

    /// The string of node `id`, if it is one.
    pub fn str(&self, id: Id) -> Option<&str> {
        match self.get(id)? {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }

    /// The integer of node `id`, if it is one (booleans are not).
    pub fn int(&self, id: Id) -> Option<i64> {
        match self.get(id)? {
            Value::Int(i) => Some(*i),
            _ => None,
        }
    }

    /// The items of a tuple or list node.
    pub fn items(&self, id: Id) -> Option<&[Id]> {
        match self.get(id)? {
            Value::Tuple(v) | Value::List(v) => Some(v),
            _ => None,
        }
    }

    /// How many nodes there are.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether there is none.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }
}

/// A short description of a value's type, for errors.
pub(crate) fn kind(v: Option<&Value>) -> &'static str {
    match v {
        None => "nothing",
        Some(Value::None) => "None",
        Some(Value::Bool(_)) => "a bool",
        Some(Value::Int(_)) => "an int",
        Some(Value::Float(_)) => "a float",
        Some(Value::Str(_)) => "a str",
        Some(Value::Bytes(_)) => "bytes",
        Some(Value::List(_)) => "a list",
        Some(Value::Tuple(_)) => "a tuple",
        Some(Value::Dict(..)) => "a dict",
        Some(Value::Set(_)) => "a set",
        Some(Value::Global(_)) => "a class or function",
        Some(Value::Foreign(_)) => "a name outside the allow list",
        Some(Value::Called(_)) => "the result of a call outside the allow list",
        Some(Value::Storage(_)) => "a storage",
        Some(Value::Tensor(_)) => "a tensor",
        Some(Value::Dtype(_)) => "a dtype",
        Some(Value::Mark) => "a mark",
    }
}

/// Appends the Python text of a string key or scalar to `out` (for names
/// and metadata).
pub(crate) fn push_display(out: &mut String, v: &Value) -> bool {
    use core::fmt::Write;
    match v {
        Value::Str(s) => out.push_str(s),
        Value::Int(i) => {
            let _ = write!(out, "{i}");
        }
        Value::Bool(b) => out.push_str(if *b { "True" } else { "False" }),
        Value::None => out.push_str("None"),
        Value::Float(f) => {
            if f.is_nan() {
                out.push_str("nan");
            } else if f.is_infinite() {
                out.push_str(if *f > 0.0 { "inf" } else { "-inf" });
            } else {
                let _ = write!(out, "{f:?}");
            }
        }
        Value::Dtype(d) => {
            out.push_str("torch.");
            out.push_str(d.names().torch.unwrap_or(d.name()));
        }
        _ => return false,
    }
    true
}
