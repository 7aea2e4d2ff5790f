//! A torch checkpoint from the value tree (docs/PICKLE.md, "Tensors
//! out"): names flattened with dots, tensors, plain values as metadata,
//! other leaves listed.

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

use super::machine::{unpickle, NameRef, Unpickled};
use super::value::{kind, push_display, Arena, Id, StorageRef, TensorRef, Value};
use crate::{Error, ErrorKind, Result};

/// Containers nest at most this deep when the tree is walked.
pub const MAX_PICKLE_DEPTH: usize = 256;

/// A checkpoint read from a pickle: what its tree holds, by flattened name.
#[derive(Debug)]
pub struct Checkpoint {
    /// The tensors, in the pickle's order.
    pub tensors: Vec<(String, TensorRef)>,
    /// The storages the pickle names (node id, storage).
    pub storages: Vec<(Id, StorageRef)>,
    /// Plain leaves (None, bools, ints, floats, strings, dtypes), as text.
    pub metadata: Vec<(String, String)>,
    /// Other leaves (bytes, sets, ...): their name and what they are.
    pub others: Vec<(String, &'static str)>,
    /// The protocol the pickle declares.
    pub protocol: u8,
}

impl Checkpoint {
    /// Reads the pickle `data` of a torch checkpoint: strict (any name
    /// outside the allow list is an error naming it and its offset).
    ///
    /// # Errors
    /// As [`unpickle`]; `InvalidPickle` for a tree nested deeper than
    /// [`MAX_PICKLE_DEPTH`], a name used twice, or a root that holds no
    /// tensor container.
    pub fn read(data: &[u8]) -> Result<Checkpoint> {
        Checkpoint::read_prefix(data).map(|(c, _)| c)
    }

    /// As [`Checkpoint::read`], for a pickle followed by other bytes: the
    /// checkpoint and where its pickle ended.
    ///
    /// # Errors
    /// As [`Checkpoint::read`].
    pub fn read_prefix(data: &[u8]) -> Result<(Checkpoint, usize)> {
        let u = unpickle(data, true)?;
        Ok((Checkpoint::from_tree(&u)?, u.end))
    }

    fn from_tree(u: &Unpickled) -> Result<Checkpoint> {
        let mut c = Checkpoint {
            tensors: Vec::new(),
            storages: Vec::new(),
            metadata: Vec::new(),
            others: Vec::new(),
            protocol: u.protocol,
        };
        let mut seen = Vec::new();
        walk(&u.arena, u.root, &mut String::new(), 0, &mut c, &mut seen)?;
        let mut names: Vec<&str> =
            c.tensors.iter().map(|(n, _)| n.as_str()).chain(c.metadata.iter().map(|(n, _)| n.as_str())).collect();
        names.sort_unstable();
        if let Some(w) = names.windows(2).find(|w| w[0] == w[1]) {
            return Err(invalid(format!("two values flatten to the name {:?}", w[0])));
        }
        // Every storage a persistent id named, whether a tensor views it
        // or not: each must be in the file.
        for i in 0..u.arena.len() {
            let id = Id(u32::try_from(i).unwrap_or(u32::MAX));
            if let Some(Value::Storage(s)) = u.arena.get(id) {
                c.storages.push((id, s.clone()));
            }
        }
        Ok(c)
    }
}

fn invalid(message: String) -> Error {
    Error::new(ErrorKind::InvalidPickle { message: message.into_boxed_str() })
}

fn walk(arena: &Arena, id: Id, name: &mut String, depth: usize, c: &mut Checkpoint, path: &mut Vec<Id>) -> Result<()> {
    if depth > MAX_PICKLE_DEPTH {
        return Err(Error::limit("pickle nesting depth", depth as u64, MAX_PICKLE_DEPTH as u64));
    }
    let v = arena.get(id);
    let container = matches!(v, Some(Value::Dict(..) | Value::List(_) | Value::Tuple(_)));
    if container {
        if path.contains(&id) {
            return Err(invalid(format!("{} contains itself", display_name(name))));
        }
        path.push(id);
    }
    let len = name.len();
    let mut child = |key: &str, child: Id, c: &mut Checkpoint, name: &mut String| -> Result<()> {
        if !name.is_empty() {
            name.push('.');
        }
        name.push_str(key);
        let r = walk(arena, child, name, depth + 1, c, path);
        name.truncate(len);
        r
    };
    match v {
        Some(Value::Dict(items, _)) => {
            for (k, item) in items.clone() {
                let mut key = String::new();
                let ok = match arena.get(k) {
                    Some(v @ (Value::Str(_) | Value::Int(_) | Value::Bool(_))) => push_display(&mut key, v),
                    _ => false,
                };
                if !ok {
                    return Err(invalid(format!(
                        "{}: a key is {}, not a string or an integer",
                        display_name(name),
                        kind(arena.get(k))
                    )));
                }
                child(&key, item, c, name)?;
            }
        }
        Some(Value::List(items) | Value::Tuple(items)) => {
            for (i, item) in items.clone().into_iter().enumerate() {
                child(&format!("{i}"), item, c, name)?;
            }
        }
        Some(Value::Tensor(t)) => c.tensors.push((name.clone(), t.clone())),
        Some(leaf) => {
            let mut text = String::new();
            if push_display(&mut text, leaf) {
                if name.is_empty() {
                    return Err(invalid(format!("the checkpoint is a single {}, not tensors", kind(Some(leaf)))));
                }
                c.metadata.push((name.clone(), text));
            } else {
                c.others.push((display_name(name), kind(Some(leaf))));
            }
        }
        None => return Err(invalid("a value of another pickle".into())),
    }
    if container {
        path.pop();
    }
    Ok(())
}

fn display_name(name: &str) -> String {
    if name.is_empty() {
        String::from("the checkpoint")
    } else {
        format!("{name:?}")
    }
}

/// What [`scan`] found: every name the pickle refers to, the calls of
/// names outside the allow list, and whether it reads as a plain tensor
/// checkpoint (and if not, why).
#[derive(Debug)]
pub struct Scan {
    /// The protocol the pickle declares.
    pub protocol: u8,
    /// Every name referred to, in order.
    pub names: Vec<NameRef>,
    /// Calls of names outside the allow list.
    pub calls: Vec<NameRef>,
    /// `Ok(tensors)` when the pickle reads as a plain tensor checkpoint
    /// (the strict reading succeeds); otherwise why not.
    pub verdict: core::result::Result<usize, Error>,
}

/// Reads the pickle `data` without stopping at names outside the allow
/// list, to say what it refers to and would call; nothing is executed.
///
/// # Errors
/// Only for a pickle that cannot be read at all (malformed, truncated, a
/// limit); names outside the allow list are reported in [`Scan`].
pub fn scan(data: &[u8]) -> Result<Scan> {
    let u = unpickle(data, false)?;
    let verdict = Checkpoint::read(data).map(|c| c.tensors.len());
    Ok(Scan { protocol: u.protocol, names: u.names, calls: u.calls, verdict })
}
