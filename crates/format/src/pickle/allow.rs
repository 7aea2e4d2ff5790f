//! The allow list (docs/PICKLE.md, "The allow list"): the names a pickle
//! may refer to, matched exactly, and each constructor applied as a pure
//! function of the value tree. Nothing is imported or called.

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

use super::value::{kind, Arena, Global, Id, StorageRef, TensorRef, Value};
use crate::Dtype;

/// Dimensions a tensor may have (torch allows 64).
pub const MAX_PICKLE_RANK: usize = 64;

/// torch's typed storage classes, by the dtype's torch name.
const STORAGE_CLASSES: [(&str, &str); 12] = [
    ("DoubleStorage", "float64"),
    ("FloatStorage", "float32"),
    ("HalfStorage", "float16"),
    ("LongStorage", "int64"),
    ("IntStorage", "int32"),
    ("ShortStorage", "int16"),
    ("CharStorage", "int8"),
    ("ByteStorage", "uint8"),
    ("BoolStorage", "bool"),
    ("BFloat16Storage", "bfloat16"),
    ("ComplexDoubleStorage", "complex128"),
    ("ComplexFloatStorage", "complex64"),
];

/// The allowed meaning of `module.name`, or `None`: refused.
pub fn lookup(module: &str, name: &str) -> Option<Global> {
    Some(match (module, name) {
        ("torch._utils", "_rebuild_tensor_v2") => Global::RebuildTensorV2,
        ("torch._utils", "_rebuild_tensor_v3") => Global::RebuildTensorV3,
        ("torch._utils", "_rebuild_tensor") => Global::RebuildTensor,
        ("torch._utils", "_rebuild_parameter") => Global::RebuildParameter,
        ("torch._utils", "_rebuild_parameter_with_state") => Global::RebuildParameterWithState,
        ("torch.storage" | "torch", "UntypedStorage") => Global::StorageClass(None),
        ("torch", n) if n.ends_with("Storage") => {
            let torch = STORAGE_CLASSES.iter().find(|(c, _)| *c == n)?.1;
            Global::StorageClass(Some(Dtype::from_torch_name(torch)?))
        }
        ("torch", "Size") => Global::Size,
        ("torch", "device") => Global::Device,
        // Every dtype of the table; a packed one (float4_e2m1fn_x2) is
        // refused where a tensor would use it, naming it.
        ("torch", n) => Global::Dtype(Dtype::from_torch_name(n)?),
        ("collections", "OrderedDict") => Global::OrderedDict,
        ("builtins" | "__builtin__", "set") => Global::Set,
        ("builtins" | "__builtin__", "frozenset") => Global::FrozenSet,
        ("_codecs", "encode") => Global::CodecsEncode,
        ("builtins" | "__builtin__", "bytearray") => Global::ByteArray,
        _ => return None,
    })
}

/// Applies `g` to the tuple `args`: the value it makes, or why not.
pub(super) fn apply(arena: &mut Arena, g: Global, args: Id) -> Result<Value, String> {
    let items: Vec<Id> = arena.items(args).ok_or("its arguments are not a tuple")?.to_vec();
    let n = items.len();
    let arg = |i: usize| items.get(i).copied();
    match g {
        Global::RebuildTensorV2 | Global::RebuildTensor | Global::RebuildTensorV3 => {
            let (need, most) = match g {
                Global::RebuildTensor => (4, 4),
                Global::RebuildTensorV2 => (6, 7),
                _ => (7, 8),
            };
            if n < need || n > most {
                return Err(format!("takes {need} to {most} arguments, got {n}"));
            }
            if g != Global::RebuildTensor {
                empty_hooks(arena, items[5])?;
            }
            let metadata = match g {
                Global::RebuildTensorV2 => arg(6),
                Global::RebuildTensorV3 => arg(7),
                _ => None,
            };
            if let Some(m) = metadata {
                if !is_empty_or_none(arena, m) {
                    return Err("tensor metadata (a tensor subclass or its state) is not supported".into());
                }
            }
            let dtype = match g {
                Global::RebuildTensorV3 => match arena.get(items[6]) {
                    Some(Value::Dtype(d)) => Some(*d),
                    other => return Err(format!("its dtype argument is {}", kind(other))),
                },
                _ => None,
            };
            tensor(arena, items[0], items[1], items[2], items[3], dtype).map(Value::Tensor)
        }
        Global::RebuildParameter | Global::RebuildParameterWithState => {
            let need = if g == Global::RebuildParameter { 3 } else { 4 };
            if n != need {
                return Err(format!("takes {need} arguments, got {n}"));
            }
            empty_hooks(arena, items[2])?;
            if need == 4 && !is_empty_or_none(arena, items[3]) {
                return Err("a parameter's state (a subclass's attributes) is not supported".into());
            }
            match arena.get(items[0]) {
                Some(Value::Tensor(t)) => Ok(Value::Tensor(t.clone())),
                other => Err(format!("its data is {}, not a tensor", kind(other))),
            }
        }
        Global::OrderedDict => match n {
            0 => Ok(Value::Dict(Vec::new(), Vec::new())),
            1 => {
                let mut pairs = Vec::new();
                for p in arena.items(items[0]).ok_or("its argument is not a list of pairs")? {
                    match arena.items(*p) {
                        Some([k, v]) => pairs.push((*k, *v)),
                        _ => return Err("its argument is not a list of pairs".into()),
                    }
                }
                Ok(Value::Dict(pairs, Vec::new()))
            }
            _ => Err(format!("takes at most 1 argument, got {n}")),
        },
        Global::Size => match (n, arg(0).and_then(|a| arena.items(a))) {
            (1, Some(dims)) if dims.iter().all(|d| arena.int(*d).is_some()) => Ok(Value::Tuple(dims.to_vec())),
            _ => Err("takes one tuple of integers".into()),
        },
        Global::Device => {
            let ty = arg(0).and_then(|a| arena.str(a)).ok_or("takes a device type string")?;
            match (n, arg(1).map(|i| arena.get(i))) {
                (1, _) => Ok(Value::Str(ty.into())),
                (2, Some(Some(Value::Int(i)))) => Ok(Value::Str(format!("{ty}:{i}").into())),
                (2, Some(Some(Value::None))) => Ok(Value::Str(ty.into())),
                _ => Err("takes a device type and an index".into()),
            }
        }
        Global::Set | Global::FrozenSet => match n {
            0 => Ok(Value::Set(Vec::new())),
            1 => Ok(Value::Set(arena.items(items[0]).ok_or("its argument is not a list")?.to_vec())),
            _ => Err(format!("takes at most 1 argument, got {n}")),
        },
        Global::CodecsEncode => {
            let text = arg(0).and_then(|a| arena.str(a)).ok_or("its first argument is not a str")?;
            let encoding = arg(1).and_then(|a| arena.str(a)).ok_or("needs an encoding")?;
            if n != 2 || !matches!(encoding, "latin1" | "latin-1" | "latin_1" | "iso-8859-1") {
                return Err(format!("is allowed only as encode(str, 'latin1'), got encoding {encoding:?}"));
            }
            text.chars()
                .map(|c| u8::try_from(u32::from(c)).map_err(|_| String::from("a character is not latin-1")))
                .collect::<Result<Vec<u8>, String>>()
                .map(Value::Bytes)
        }
        Global::ByteArray => match (n, arg(0).map(|a| arena.get(a))) {
            (0, _) => Ok(Value::Bytes(Vec::new())),
            (1, Some(Some(Value::Bytes(b)))) => Ok(Value::Bytes(b.clone())),
            _ => Err("takes bytes".into()),
        },
        Global::StorageClass(_) | Global::Dtype(_) => {
            Err("is allowed only inside a storage's persistent id, never called".into())
        }
    }
}

/// Backward hooks must be empty (torch never saves hooks).
fn empty_hooks(arena: &Arena, id: Id) -> Result<(), String> {
    if is_empty_or_none(arena, id) {
        Ok(())
    } else {
        Err("backward hooks are not empty (torch never saves hooks)".into())
    }
}

fn is_empty_or_none(arena: &Arena, id: Id) -> bool {
    match arena.get(id) {
        Some(Value::None) => true,
        Some(Value::Dict(items, attrs)) => items.is_empty() && attrs.is_empty(),
        Some(Value::Tuple(v) | Value::List(v)) => v.is_empty(),
        _ => false,
    }
}

/// A tensor of `storage` (a storage node), checked: every element it
/// addresses lies inside the storage, computed with overflow checks.
fn tensor(
    arena: &Arena,
    storage: Id,
    offset: Id,
    size: Id,
    stride: Id,
    dtype: Option<Dtype>,
) -> Result<TensorRef, String> {
    let st: &StorageRef = match arena.get(storage) {
        Some(Value::Storage(s)) => s,
        other => return Err(format!("its storage is {}", kind(other))),
    };
    let offset = arena
        .int(offset)
        .and_then(|o| u64::try_from(o).ok())
        .ok_or("its storage offset is not a non-negative integer")?;
    let ints = |id: Id, what: &str| -> Result<Vec<u64>, String> {
        let items = arena.items(id).ok_or_else(|| format!("its {what} is not a tuple"))?;
        if items.len() > MAX_PICKLE_RANK {
            return Err(format!("its {what} has {} dimensions, more than {MAX_PICKLE_RANK}", items.len()));
        }
        items
            .iter()
            .map(|i| arena.int(*i).and_then(|v| u64::try_from(v).ok()))
            .collect::<Option<Vec<u64>>>()
            .ok_or_else(|| format!("its {what} holds a value that is not a non-negative integer"))
    };
    let shape = ints(size, "size")?;
    let stride = ints(stride, "stride")?;
    if shape.len() != stride.len() {
        return Err(format!("its size has {} dimensions and its stride {}", shape.len(), stride.len()));
    }
    let dtype = match (dtype, st.dtype) {
        (Some(d), None) | (None, Some(d)) => d,
        (Some(d), Some(s)) if d == s => d,
        (Some(d), Some(s)) => return Err(format!("its dtype {} differs from its storage's {}", d.name(), s.name())),
        (None, None) => return Err("an untyped storage needs a dtype (_rebuild_tensor_v3)".into()),
    };
    let width = dtype.names().byte_width().ok_or_else(|| {
        format!(
            "dtype {} (torch.{}) packs values below a byte, which is not read yet",
            dtype.name(),
            dtype.names().torch.unwrap_or("?")
        )
    })?;
    // The elements addressed: offset + sum((size - 1) * stride), if any.
    let mut elements: u64 = 1;
    let mut last = offset;
    for (&n, &s) in shape.iter().zip(&stride) {
        elements = elements.checked_mul(n).ok_or("its element count overflows")?;
        if n > 0 {
            last = (n - 1).checked_mul(s).and_then(|x| last.checked_add(x)).ok_or("its strides overflow")?;
        }
    }
    if elements > 0 {
        let storage_bytes = st.nbytes().ok_or("its storage's size overflows")?;
        let end = last.checked_add(1).and_then(|e| e.checked_mul(width)).ok_or("its extent overflows")?;
        if end > storage_bytes {
            return Err(format!(
                "it addresses bytes up to {end} of storage {:?}, which holds {storage_bytes}",
                &*st.key
            ));
        }
        // Its logical size must be representable too (a stride-0 view of
        // a few bytes may claim terabytes: checked by the caller's limits).
        elements.checked_mul(width).ok_or("its byte length overflows")?;
    }
    Ok(TensorRef { storage, dtype, offset, shape, stride })
}
