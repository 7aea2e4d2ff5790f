//! The pickle machine, run symbolically (docs/PICKLE.md, "The machine"):
//! every opcode of protocols 0 to 5, values built in an [`Arena`], names
//! matched against the allow list, nothing imported or called.

use alloc::boxed::Box;
use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;

use hashbrown::HashMap;

use super::allow::{apply, lookup};
use super::value::{kind, Arena, Global, Id, StorageRef, Value};
use crate::{Error, ErrorKind, Result};

/// Entries the stack, the mark stack and the memo may each hold.
pub const MAX_PICKLE_STACK: usize = 1_000_000;

/// A name the pickle refers to, where, and whether the allow list has it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NameRef {
    /// `module.name`.
    pub name: String,
    /// The byte offset of the opcode in the pickle.
    pub offset: u64,
    /// Whether it is on the allow list.
    pub allowed: bool,
}

/// What a pickle built: its arena and its root, and (when scanning) every
/// name it referred to and every call of a name outside the allow list.
#[derive(Debug)]
pub struct Unpickled {
    /// The values.
    pub arena: Arena,
    /// The value `STOP` returned.
    pub root: Id,
    /// The highest protocol the pickle declares (`PROTO`), 0 without one.
    pub protocol: u8,
    /// Every name a `GLOBAL`, `STACK_GLOBAL` or `INST` referred to, in order.
    pub names: Vec<NameRef>,
    /// Calls of names outside the allow list (only when scanning).
    pub calls: Vec<NameRef>,
    /// Where the pickle ended: the byte after its `STOP` (a legacy torch
    /// checkpoint is several pickles and raw bytes one after another).
    pub end: usize,
}

fn bad(message: impl Into<String>, offset: usize) -> Error {
    Error::at(ErrorKind::InvalidPickle { message: message.into().into_boxed_str() }, offset as u64)
}

/// Runs the pickle `data` symbolically. `strict`: a name outside the allow
/// list (or anything else the safe reader does not do) is an error naming
/// it and its offset. Not strict (scanning): such names and their calls
/// become opaque values, recorded in [`Unpickled`]; the malformed and the
/// limits are errors either way.
///
/// # Errors
/// `InvalidPickle` (what, at which byte), `Truncated`, `LimitExceeded`.
pub fn unpickle(data: &[u8], strict: bool) -> Result<Unpickled> {
    Machine {
        data,
        pos: 0,
        arena: Arena::default(),
        stack: Vec::new(),
        marks: Vec::new(),
        memo: HashMap::new(),
        strict,
        protocol: 0,
        names: Vec::new(),
        calls: Vec::new(),
        storages: HashMap::new(),
    }
    .run()
}

struct Machine<'a> {
    data: &'a [u8],
    pos: usize,
    arena: Arena,
    stack: Vec<Id>,
    marks: Vec<usize>,
    memo: HashMap<u64, Id>,
    strict: bool,
    protocol: u8,
    names: Vec<NameRef>,
    calls: Vec<NameRef>,
    storages: HashMap<Box<str>, Id>,
}

impl Machine<'_> {
    fn take(&mut self, n: usize, what: &'static str) -> Result<&[u8]> {
        let rest = self.data.get(self.pos..).unwrap_or(&[]);
        match rest.get(..n) {
            Some(b) => {
                self.pos += n;
                Ok(b)
            }
            None => Err(Error::truncated(what, (self.pos as u64).saturating_add(n as u64), self.data.len() as u64)),
        }
    }

    fn byte(&mut self, what: &'static str) -> Result<u8> {
        Ok(self.take(1, what)?[0])
    }

    fn le<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N]> {
        let b = self.take(N, what)?;
        let mut out = [0u8; N];
        out.copy_from_slice(b);
        Ok(out)
    }

    /// A length field's value, which must fit in the bytes left: checked
    /// before anything of that length is allocated.
    fn len(&mut self, n: u64, what: &'static str) -> Result<usize> {
        let left = (self.data.len() - self.pos.min(self.data.len())) as u64;
        if n > left {
            return Err(bad(format!("{what} claims {n} bytes, more than the {left} left in the pickle"), self.pos));
        }
        Ok(n as usize)
    }

    /// A protocol 0 argument: the bytes up to the next newline.
    fn line(&mut self, what: &'static str) -> Result<&[u8]> {
        let rest = self.data.get(self.pos..).unwrap_or(&[]);
        let end = rest
            .iter()
            .position(|&b| b == b'\n')
            .ok_or_else(|| Error::truncated(what, self.data.len() as u64 + 1, self.data.len() as u64))?;
        self.pos += end + 1;
        Ok(&rest[..end])
    }

    /// A protocol 0 memo index (PUT, GET): a decimal line.
    fn line_index(&mut self, what: &'static str, at: usize) -> Result<u64> {
        let text = self.line(what)?;
        parse_int(text)
            .and_then(|k| u64::try_from(k).ok())
            .ok_or_else(|| bad(format!("{what}'s index is not an integer"), at))
    }

    /// A module and a name on two lines (GLOBAL, INST).
    fn line_name(&mut self, what: &'static str, at: usize) -> Result<(String, String)> {
        let mut part = |which: &str| {
            let text = self.line(what)?.to_vec();
            String::from_utf8(text).map_err(|_| bad(format!("{what}'s {which} is not UTF-8"), at))
        };
        Ok((part("module")?, part("name")?))
    }

    fn push(&mut self, v: Value, at: usize) -> Result<()> {
        let id = self.arena.push(v);
        self.push_id(id, at)
    }

    fn push_id(&mut self, id: Id, at: usize) -> Result<()> {
        if self.stack.len() >= MAX_PICKLE_STACK {
            return Err(Error::limit("pickle stack entries", self.stack.len() as u64 + 1, MAX_PICKLE_STACK as u64)
                .at_offset(at as u64));
        }
        self.stack.push(id);
        Ok(())
    }

    fn pop(&mut self, at: usize) -> Result<Id> {
        let floor = self.marks.last().copied().unwrap_or(0);
        if self.stack.len() <= floor {
            return Err(bad("pops an empty stack", at));
        }
        self.stack.pop().ok_or_else(|| bad("pops an empty stack", at))
    }

    fn top(&self, at: usize) -> Result<Id> {
        let floor = self.marks.last().copied().unwrap_or(0);
        if self.stack.len() <= floor {
            return Err(bad("needs a value on the stack", at));
        }
        self.stack.last().copied().ok_or_else(|| bad("needs a value on the stack", at))
    }

    /// The items above the topmost mark, and the mark removed.
    fn pop_mark(&mut self, at: usize) -> Result<Vec<Id>> {
        let mark = self.marks.pop().ok_or_else(|| bad("has no mark to pop to", at))?;
        Ok(self.stack.split_off(mark.min(self.stack.len())))
    }

    fn memo_put(&mut self, key: u64, at: usize) -> Result<()> {
        let id = self.top(at)?;
        if !self.memo.contains_key(&key) && self.memo.len() >= MAX_PICKLE_STACK {
            return Err(Error::limit("pickle memo entries", self.memo.len() as u64 + 1, MAX_PICKLE_STACK as u64)
                .at_offset(at as u64));
        }
        self.memo.insert(key, id);
        Ok(())
    }

    fn memo_get(&mut self, key: u64, at: usize) -> Result<()> {
        let id =
            *self.memo.get(&key).ok_or_else(|| bad(format!("fetches memo entry {key}, which was never put"), at))?;
        self.push_id(id, at)
    }

    fn value(&self, id: Id) -> Option<&Value> {
        self.arena.get(id)
    }

    /// A name reference: allowed, or refused (strict), or opaque.
    fn global(&mut self, module: &str, name: &str, at: usize) -> Result<Value> {
        let full = format!("{module}.{name}");
        let allowed = lookup(module, name);
        self.names.push(NameRef { name: full.clone(), offset: at as u64, allowed: allowed.is_some() });
        match allowed {
            // A dtype is a value (`_rebuild_tensor_v3`'s argument, or kept).
            Some(Global::Dtype(d)) => Ok(Value::Dtype(d)),
            Some(g) => Ok(Value::Global(g)),
            None if self.strict => Err(bad(
                format!(
                    "refers to {full}, which is not on the allow list of plain tensor checkpoints (docs/PICKLE.md)"
                ),
                at,
            )),
            None => Ok(Value::Foreign(full.into_boxed_str())),
        }
    }

    /// Applies the callable `f` to the tuple `args` (REDUCE, NEWOBJ, OBJ, INST).
    fn call(&mut self, f: Id, args: Id, how: &str, at: usize) -> Result<()> {
        let v = match self.value(f).cloned() {
            Some(Value::Global(g)) => {
                apply(&mut self.arena, g, args).map_err(|why| bad(format!("{how} of {}: {why}", global_name(g)), at))?
            }
            Some(Value::Foreign(name)) | Some(Value::Called(name)) if !self.strict => {
                self.calls.push(NameRef { name: name.to_string(), offset: at as u64, allowed: false });
                Value::Called(name)
            }
            other => {
                return Err(bad(
                    format!("{how} calls {}, which is not a callable of the allow list", kind(other.as_ref())),
                    at,
                ))
            }
        };
        self.push(v, at)
    }

    fn run(mut self) -> Result<Unpickled> {
        loop {
            let at = self.pos;
            let op = self.byte("pickle opcode")?;
            match op {
                b'\x80' => {
                    self.protocol = self.byte("PROTO")?;
                    if self.protocol > 5 {
                        return Err(bad(format!("declares protocol {}, past 5", self.protocol), at));
                    }
                }
                b'\x95' => {
                    // FRAME: a length, checked; the frame's opcodes follow.
                    let n = u64::from_le_bytes(self.le("FRAME")?);
                    self.len(n, "FRAME")?;
                }
                b'.' => {
                    let root = self.pop(at)?;
                    let Machine { arena, protocol, names, calls, pos, .. } = self;
                    return Ok(Unpickled { arena, root, protocol, names, calls, end: pos });
                }
                b'(' => {
                    if self.marks.len() >= MAX_PICKLE_STACK {
                        return Err(Error::limit("pickle marks", self.marks.len() as u64 + 1, MAX_PICKLE_STACK as u64)
                            .at_offset(at as u64));
                    }
                    self.marks.push(self.stack.len());
                }
                b'0' => {
                    self.pop(at)?;
                }
                b'1' => {
                    self.pop_mark(at)?;
                }
                b'2' => {
                    let id = self.top(at)?;
                    self.push_id(id, at)?;
                }
                b'N' => self.push(Value::None, at)?,
                b'\x88' => self.push(Value::Bool(true), at)?,
                b'\x89' => self.push(Value::Bool(false), at)?,
                b'I' => {
                    let text = self.line("INT")?;
                    let v = match text {
                        b"00" => Value::Bool(false),
                        b"01" => Value::Bool(true),
                        t => Value::Int(parse_int(t).ok_or_else(|| bad("INT is not an integer", at))?),
                    };
                    self.push(v, at)?;
                }
                b'J' => {
                    let v = i32::from_le_bytes(self.le("BININT")?);
                    self.push(Value::Int(v.into()), at)?;
                }
                b'K' => {
                    let v = self.byte("BININT1")?;
                    self.push(Value::Int(v.into()), at)?;
                }
                b'M' => {
                    let v = u16::from_le_bytes(self.le("BININT2")?);
                    self.push(Value::Int(v.into()), at)?;
                }
                b'L' => {
                    let text = self.line("LONG")?;
                    let t = text.strip_suffix(b"L").unwrap_or(text);
                    let v = parse_int(t).ok_or_else(|| bad("LONG is not an integer that fits in 64 bits", at))?;
                    self.push(Value::Int(v), at)?;
                }
                b'\x8a' | b'\x8b' => {
                    let n = if op == b'\x8a' {
                        u64::from(self.byte("LONG1")?)
                    } else {
                        u64::from(u32::from_le_bytes(self.le("LONG4")?))
                    };
                    let n = self.len(n, "LONG")?;
                    let bytes = self.take(n, "LONG")?;
                    let v =
                        long(bytes).ok_or_else(|| bad("an integer beyond 64 bits (no checkpoint needs one)", at))?;
                    self.push(Value::Int(v), at)?;
                }
                b'F' => {
                    let text = self.line("FLOAT")?;
                    let v = core::str::from_utf8(text)
                        .ok()
                        .and_then(|t| t.trim().parse::<f64>().ok())
                        .ok_or_else(|| bad("FLOAT is not a float", at))?;
                    self.push(Value::Float(v), at)?;
                }
                b'G' => {
                    let v = f64::from_be_bytes(self.le("BINFLOAT")?);
                    self.push(Value::Float(v), at)?;
                }
                b'S' => {
                    let text = self.line("STRING")?.to_vec();
                    let s = py_string_literal(&text).ok_or_else(|| bad("STRING is not a quoted string", at))?;
                    self.push(Value::Str(s.into_boxed_str()), at)?;
                }
                b'T' | b'U' => {
                    // Python 2 byte strings, read as latin-1 text (as
                    // Python 3's unpickler does by default: encoding ASCII).
                    let n = if op == b'T' {
                        u64::from(u32::from_le_bytes(self.le("BINSTRING")?))
                    } else {
                        u64::from(self.byte("SHORT_BINSTRING")?)
                    };
                    let n = self.len(n, "BINSTRING")?;
                    let s: String = self.take(n, "BINSTRING")?.iter().map(|&b| char::from(b)).collect();
                    self.push(Value::Str(s.into_boxed_str()), at)?;
                }
                b'V' => {
                    let text = self.line("UNICODE")?.to_vec();
                    let s =
                        raw_unicode_escape(&text).ok_or_else(|| bad("UNICODE is not raw-unicode-escape text", at))?;
                    self.push(Value::Str(s.into_boxed_str()), at)?;
                }
                b'X' | b'\x8c' | b'\x8d' => {
                    let n = match op {
                        b'X' => u64::from(u32::from_le_bytes(self.le("BINUNICODE")?)),
                        b'\x8c' => u64::from(self.byte("SHORT_BINUNICODE")?),
                        _ => u64::from_le_bytes(self.le("BINUNICODE8")?),
                    };
                    let n = self.len(n, "BINUNICODE")?;
                    let bytes = self.take(n, "BINUNICODE")?;
                    let s = core::str::from_utf8(bytes).map_err(|_| bad("a string is not UTF-8", at))?.to_string();
                    self.push(Value::Str(s.into_boxed_str()), at)?;
                }
                b'B' | b'C' | b'\x8e' | b'\x96' => {
                    let n = match op {
                        b'B' => u64::from(u32::from_le_bytes(self.le("BINBYTES")?)),
                        b'C' => u64::from(self.byte("SHORT_BINBYTES")?),
                        _ => u64::from_le_bytes(self.le("BINBYTES8")?),
                    };
                    let n = self.len(n, "BINBYTES")?;
                    let bytes = self.take(n, "BINBYTES")?.to_vec();
                    self.push(Value::Bytes(bytes), at)?;
                }
                b']' => self.push(Value::List(Vec::new()), at)?,
                b')' => self.push(Value::Tuple(Vec::new()), at)?,
                b'}' => self.push(Value::Dict(Vec::new(), Vec::new()), at)?,
                b'\x8f' => self.push(Value::Set(Vec::new()), at)?,
                b'l' => {
                    let items = self.pop_mark(at)?;
                    self.push(Value::List(items), at)?;
                }
                b't' => {
                    let items = self.pop_mark(at)?;
                    self.push(Value::Tuple(items), at)?;
                }
                b'\x85' | b'\x86' | b'\x87' => {
                    let n = usize::from(op - b'\x84');
                    let mut items = Vec::with_capacity(n);
                    for _ in 0..n {
                        items.push(self.pop(at)?);
                    }
                    items.reverse();
                    self.push(Value::Tuple(items), at)?;
                }
                b'd' => {
                    let items = self.pop_mark(at)?;
                    let pairs = pairs(&items).ok_or_else(|| bad("DICT has an odd number of items", at))?;
                    let mut dict = Vec::new();
                    self.set_items(&mut dict, pairs, at)?;
                    self.push(Value::Dict(dict, Vec::new()), at)?;
                }
                b'\x91' => {
                    let items = self.pop_mark(at)?;
                    self.push(Value::Set(items), at)?;
                }
                b'a' => {
                    let v = self.pop(at)?;
                    let list = self.top(at)?;
                    self.extend(list, &[v], at)?;
                }
                b'e' => {
                    let items = self.pop_mark(at)?;
                    let list = self.top(at)?;
                    self.extend(list, &items, at)?;
                }
                b'\x90' => {
                    let items = self.pop_mark(at)?;
                    let set = self.top(at)?;
                    match self.arena.get_mut(set) {
                        Some(Value::Set(v)) => v.extend(items),
                        other => return Err(bad(format!("ADDITEMS to {}", kind(other.map(|v| &*v))), at)),
                    }
                }
                b's' => {
                    let v = self.pop(at)?;
                    let k = self.pop(at)?;
                    let dict = self.top(at)?;
                    self.setitems(dict, &[k, v], at)?;
                }
                b'u' => {
                    let items = self.pop_mark(at)?;
                    let dict = self.top(at)?;
                    self.setitems(dict, &items, at)?;
                }
                b'p' => {
                    let key = self.line_index("PUT", at)?;
                    self.memo_put(key, at)?;
                }
                b'q' => {
                    let key = self.byte("BINPUT")?;
                    self.memo_put(key.into(), at)?;
                }
                b'r' => {
                    let key = u32::from_le_bytes(self.le("LONG_BINPUT")?);
                    self.memo_put(key.into(), at)?;
                }
                b'\x94' => {
                    let key = self.memo.len() as u64;
                    self.memo_put(key, at)?;
                }
                b'g' => {
                    let key = self.line_index("GET", at)?;
                    self.memo_get(key, at)?;
                }
                b'h' => {
                    let key = self.byte("BINGET")?;
                    self.memo_get(key.into(), at)?;
                }
                b'j' => {
                    let key = u32::from_le_bytes(self.le("LONG_BINGET")?);
                    self.memo_get(key.into(), at)?;
                }
                b'c' => {
                    let (module, name) = self.line_name("GLOBAL", at)?;
                    let v = self.global(&module, &name, at)?;
                    self.push(v, at)?;
                }
                b'\x93' => {
                    let name = self.pop(at)?;
                    let module = self.pop(at)?;
                    let (Some(module), Some(name)) =
                        (self.arena.str(module).map(String::from), self.arena.str(name).map(String::from))
                    else {
                        return Err(bad("STACK_GLOBAL's module and name are not strings", at));
                    };
                    let v = self.global(&module, &name, at)?;
                    self.push(v, at)?;
                }
                b'i' => {
                    let (module, name) = self.line_name("INST", at)?;
                    let items = self.pop_mark(at)?;
                    let v = self.global(&module, &name, at)?;
                    let f = self.arena.push(v);
                    let args = self.arena.push(Value::Tuple(items));
                    self.call(f, args, "INST", at)?;
                }
                b'o' => {
                    let mut items = self.pop_mark(at)?;
                    if items.is_empty() {
                        return Err(bad("OBJ has no class", at));
                    }
                    let f = items.remove(0);
                    let args = self.arena.push(Value::Tuple(items));
                    self.call(f, args, "OBJ", at)?;
                }
                b'R' => {
                    let args = self.pop(at)?;
                    let f = self.pop(at)?;
                    self.call(f, args, "REDUCE", at)?;
                }
                b'\x81' => {
                    let args = self.pop(at)?;
                    let cls = self.pop(at)?;
                    self.call(cls, args, "NEWOBJ", at)?;
                }
                b'\x92' => {
                    let kwargs = self.pop(at)?;
                    let args = self.pop(at)?;
                    let cls = self.pop(at)?;
                    match self.value(kwargs) {
                        Some(Value::Dict(items, _)) if items.is_empty() => {}
                        _ if !self.strict => {}
                        _ => return Err(bad("NEWOBJ_EX with keyword arguments", at)),
                    }
                    self.call(cls, args, "NEWOBJ_EX", at)?;
                }
                b'b' => {
                    let state = self.pop(at)?;
                    let target = self.top(at)?;
                    self.build(target, state, at)?;
                }
                b'P' | b'Q' => {
                    let pid = if op == b'P' {
                        let text = self.line("PERSID")?.to_vec();
                        let s = String::from_utf8(text).map_err(|_| bad("PERSID is not text", at))?;
                        self.arena.push(Value::Str(s.into_boxed_str()))
                    } else {
                        self.pop(at)?
                    };
                    let storage = self.storage(pid, at)?;
                    self.push_id(storage, at)?;
                }
                b'\x82' | b'\x83' | b'\x84' => {
                    return Err(bad(
                        "EXT1/EXT2/EXT4 name a global through the copyreg extension registry, which is refused",
                        at,
                    ));
                }
                b'\x97' | b'\x98' => {
                    return Err(bad(
                        "NEXT_BUFFER/READONLY_BUFFER (out-of-band buffers) are refused: a file has none",
                        at,
                    ));
                }
                other => return Err(bad(format!("unknown opcode 0x{other:02x}"), at)),
            }
        }
    }

    fn extend(&mut self, list: Id, items: &[Id], at: usize) -> Result<()> {
        match self.arena.get_mut(list) {
            Some(Value::List(v)) => {
                v.extend_from_slice(items);
                Ok(())
            }
            Some(Value::Called(_) | Value::Foreign(_)) if !self.strict => Ok(()),
            other => Err(bad(format!("APPEND to {}", kind(other.map(|v| &*v))), at)),
        }
    }

    fn setitems(&mut self, dict: Id, items: &[Id], at: usize) -> Result<()> {
        let pairs = pairs(items).ok_or_else(|| bad("SETITEMS has an odd number of items", at))?;
        let mut entries = match self.arena.get_mut(dict) {
            Some(Value::Dict(entries, _)) => core::mem::take(entries),
            Some(Value::Called(_) | Value::Foreign(_)) if !self.strict => return Ok(()),
            other => return Err(bad(format!("SETITEM on {}", kind(other.map(|v| &*v))), at)),
        };
        let done = self.set_items(&mut entries, pairs, at);
        if let Some(Value::Dict(e, _)) = self.arena.get_mut(dict) {
            *e = entries;
        }
        done
    }

    /// Sets `pairs` in `entries`: a key already there keeps its place and
    /// takes the new value (Python's dict). Keys must be plain values.
    fn set_items(&self, entries: &mut Vec<(Id, Id)>, pairs: Vec<(Id, Id)>, at: usize) -> Result<()> {
        for (k, v) in pairs {
            let key = self.value(k);
            if !matches!(
                key,
                Some(
                    Value::Str(_)
                        | Value::Int(_)
                        | Value::Bool(_)
                        | Value::None
                        | Value::Float(_)
                        | Value::Tuple(_)
                        | Value::Bytes(_)
                )
            ) && self.strict
            {
                return Err(bad(format!("a dictionary key is {}", kind(key)), at));
            }
            match entries.iter_mut().find(|(ek, _)| same_key(&self.arena, *ek, k)) {
                Some(e) => e.1 = v,
                None => entries.push((k, v)),
            }
        }
        Ok(())
    }

    /// BUILD: only a dictionary's attributes (an OrderedDict subclass's
    /// `__dict__`), kept aside.
    fn build(&mut self, target: Id, state: Id, at: usize) -> Result<()> {
        let attrs = match self.value(state) {
            Some(Value::Dict(items, _)) => items.clone(),
            Some(Value::None) => Vec::new(),
            other if self.strict => return Err(bad(format!("BUILD with {} as state", kind(other)), at)),
            _ => return Ok(()),
        };
        match self.arena.get_mut(target) {
            Some(Value::Dict(_, a)) => {
                a.extend(attrs);
                Ok(())
            }
            _ if !self.strict => Ok(()),
            other => {
                Err(bad(format!("BUILD on {} (only a dictionary's attributes are kept)", kind(other.map(|v| &*v))), at))
            }
        }
    }

    /// A storage from torch's persistent id `("storage", class, key,
    /// location, numel)` (a legacy checkpoint's adds a view, which must be
    /// `None`); the same key twice is the same storage.
    fn storage(&mut self, pid: Id, at: usize) -> Result<Id> {
        let items = self.arena.items(pid).map(<[Id]>::to_vec);
        if items.as_ref().and_then(|i| i.get(5)).is_some_and(|v| !matches!(self.value(*v), Some(Value::None))) {
            return Err(bad("a legacy storage view (a persistent id with view metadata) is not supported", at));
        }
        let Some(items) = items.filter(|i| i.len() == 5 || i.len() == 6) else {
            return Err(bad(
                "a persistent id that is not torch's 5-tuple (\"storage\", class, key, location, numel)",
                at,
            ));
        };
        if self.arena.str(items[0]) != Some("storage") {
            return Err(bad("a persistent id that does not start with \"storage\"", at));
        }
        let dtype = match self.value(items[1]) {
            Some(Value::Global(Global::StorageClass(d))) => *d,
            other => return Err(bad(format!("a persistent id whose storage class is {}", kind(other)), at)),
        };
        let key: Box<str> =
            self.arena.str(items[2]).ok_or_else(|| bad("a persistent id whose key is not a str", at))?.into();
        if key.is_empty() || key.contains(['/', '\\']) || &*key == ".." || &*key == "." {
            return Err(bad(format!("a storage key {key:?} that is not a plain name"), at));
        }
        let location: Box<str> = self.arena.str(items[3]).unwrap_or("").into();
        let numel = self
            .arena
            .int(items[4])
            .and_then(|n| u64::try_from(n).ok())
            .ok_or_else(|| bad("a persistent id whose numel is not a non-negative integer", at))?;
        let st = StorageRef { key: key.clone(), dtype, numel, location };
        if st.nbytes().is_none() {
            return Err(bad(format!("storage {key:?}'s byte length overflows ({numel} elements)"), at));
        }
        if let Some(&id) = self.storages.get(&key) {
            return match self.value(id) {
                Some(Value::Storage(s)) if s.dtype == st.dtype && s.numel == st.numel => Ok(id),
                _ => Err(bad(format!("storage {key:?} is named twice with different types or sizes"), at)),
            };
        }
        let id = self.arena.push(Value::Storage(st));
        self.storages.insert(key, id);
        Ok(id)
    }
}

/// The allow-list name of `g`, for errors.
pub(crate) fn global_name(g: Global) -> String {
    match g {
        Global::RebuildTensorV2 => "torch._utils._rebuild_tensor_v2".into(),
        Global::RebuildTensorV3 => "torch._utils._rebuild_tensor_v3".into(),
        Global::RebuildTensor => "torch._utils._rebuild_tensor".into(),
        Global::RebuildParameter => "torch._utils._rebuild_parameter".into(),
        Global::RebuildParameterWithState => "torch._utils._rebuild_parameter_with_state".into(),
        Global::StorageClass(None) => "torch.UntypedStorage".into(),
        Global::StorageClass(Some(d)) => format!("the {} storage class", d.name()),
        Global::Dtype(d) => format!("torch.{}", d.names().torch.unwrap_or(d.name())),
        Global::OrderedDict => "collections.OrderedDict".into(),
        Global::Size => "torch.Size".into(),
        Global::Device => "torch.device".into(),
        Global::Set => "builtins.set".into(),
        Global::FrozenSet => "builtins.frozenset".into(),
        Global::CodecsEncode => "_codecs.encode".into(),
        Global::ByteArray => "builtins.bytearray".into(),
    }
}

fn pairs(items: &[Id]) -> Option<Vec<(Id, Id)>> {
    if !items.len().is_multiple_of(2) {
        return None;
    }
    Some(items.chunks_exact(2).map(|c| (c[0], c[1])).collect())
}

/// Whether two keys are equal as Python would compare them (plain values
/// only; others by identity).
fn same_key(arena: &Arena, a: Id, b: Id) -> bool {
    if a == b {
        return true;
    }
    match (arena.get(a), arena.get(b)) {
        (Some(Value::Str(x)), Some(Value::Str(y))) => x == y,
        (Some(Value::Int(x)), Some(Value::Int(y))) => x == y,
        (Some(Value::Bool(x)), Some(Value::Bool(y))) => x == y,
        (Some(Value::Int(x)), Some(Value::Bool(y))) | (Some(Value::Bool(y)), Some(Value::Int(x))) => {
            *x == i64::from(*y)
        }
        (Some(Value::None), Some(Value::None)) => true,
        (Some(Value::Bytes(x)), Some(Value::Bytes(y))) => x == y,
        _ => false,
    }
}

fn parse_int(text: &[u8]) -> Option<i64> {
    core::str::from_utf8(text).ok()?.trim().parse().ok()
}

/// A little-endian two's complement integer (LONG1/LONG4), if it fits.
fn long(bytes: &[u8]) -> Option<i64> {
    if bytes.is_empty() {
        return Some(0);
    }
    let negative = bytes.last().is_some_and(|b| b & 0x80 != 0);
    let fill = if negative { 0xff } else { 0 };
    if bytes.len() > 8 && bytes[8..].iter().any(|&b| b != fill) {
        return None;
    }
    let mut buf = [fill; 8];
    let n = bytes.len().min(8);
    buf[..n].copy_from_slice(&bytes[..n]);
    let v = i64::from_le_bytes(buf);
    // The sign must survive the cut.
    (bytes.len() <= 8 || (v < 0) == negative).then_some(v)
}

/// A Python 2 string literal (protocol 0's STRING): quoted, with escapes.
fn py_string_literal(text: &[u8]) -> Option<String> {
    let q = *text.first()?;
    if !(q == b'\'' || q == b'"') || text.len() < 2 || *text.last()? != q {
        return None;
    }
    let inner = &text[1..text.len() - 1];
    let mut out = String::new();
    let mut i = 0;
    while i < inner.len() {
        let b = inner[i];
        if b != b'\\' {
            out.push(char::from(b));
            i += 1;
            continue;
        }
        let e = *inner.get(i + 1)?;
        i += 2;
        match e {
            b'n' => out.push('\n'),
            b't' => out.push('\t'),
            b'r' => out.push('\r'),
            b'\\' => out.push('\\'),
            b'\'' => out.push('\''),
            b'"' => out.push('"'),
            b'0'..=b'7' => {
                let mut v = u32::from(e - b'0');
                for _ in 0..2 {
                    match inner.get(i) {
                        Some(&d @ b'0'..=b'7') => {
                            v = v * 8 + u32::from(d - b'0');
                            i += 1;
                        }
                        _ => break,
                    }
                }
                out.push(char::from(u8::try_from(v).ok()?));
            }
            b'x' => {
                let hex = core::str::from_utf8(inner.get(i..i + 2)?).ok()?;
                out.push(char::from(u8::from_str_radix(hex, 16).ok()?));
                i += 2;
            }
            _ => {
                out.push('\\');
                out.push(char::from(e));
            }
        }
    }
    Some(out)
}

/// raw-unicode-escape text (protocol 0's UNICODE): bytes as latin-1, and
/// `\uXXXX`, `\UXXXXXXXX` escapes.
fn raw_unicode_escape(text: &[u8]) -> Option<String> {
    let mut out = String::new();
    let mut i = 0;
    while i < text.len() {
        let b = text[i];
        if b == b'\\' && matches!(text.get(i + 1), Some(b'u' | b'U')) {
            let n = if text[i + 1] == b'u' { 4 } else { 8 };
            let hex = core::str::from_utf8(text.get(i + 2..i + 2 + n)?).ok()?;
            out.push(char::from_u32(u32::from_str_radix(hex, 16).ok()?)?);
            i += 2 + n;
        } else {
            out.push(char::from(b));
            i += 1;
        }
    }
    Some(out)
}
