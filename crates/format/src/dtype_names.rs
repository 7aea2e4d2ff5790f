//! Every framework's name for each element type: the one table the CLI,
//! io (distributed checkpoints) and the Python bindings (torch, numpy with
//! ml_dtypes, JAX, TensorFlow, Paddle, MLX objects) take their names from.

use crate::dtype::Dtype;

/// What each framework calls one [`Dtype`] (`None`: it has no such type).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DtypeNames {
    /// The element type (its header name is [`Dtype::name`]).
    pub dtype: Dtype,
    /// torch's attribute (`torch.float8_e4m3fn`); the name distributed
    /// checkpoints store. F4 is torch's `float4_e2m1fn_x2`, two elements a
    /// byte (its last dimension is half the file's).
    pub torch: Option<&'static str>,
    /// numpy's own dtype name, for the types numpy has.
    pub numpy: Option<&'static str>,
    /// ml_dtypes' attribute, for the types numpy lacks (and JAX uses).
    pub ml_dtypes: Option<&'static str>,
    /// TensorFlow's attribute.
    pub tensorflow: Option<&'static str>,
    /// Paddle's attribute (Paddle has no unsigned type but uint8).
    pub paddle: Option<&'static str>,
    /// mlx.core's attribute.
    pub mlx: Option<&'static str>,
    /// The plain numpy type of the same width a value is handed over as
    /// where a framework (or DLPack) lacks the type: bits unchanged.
    pub carrier: Option<&'static str>,
}

impl DtypeNames {
    /// Bytes an element, for types of whole-byte elements.
    pub const fn byte_width(&self) -> Option<u64> {
        match self.dtype.bits() {
            b if b % 8 == 0 => Some(b / 8),
            _ => None,
        }
    }

    /// Whether plain numpy lacks the type (it needs ml_dtypes, or is
    /// packed below a byte): an "exotic" type.
    pub const fn is_exotic(&self) -> bool {
        self.numpy.is_none()
    }
}

const fn row(dtype: Dtype, torch: &'static str, numpy: &'static str) -> DtypeNames {
    // The plain types: every framework but Paddle (for unsigned) and MLX
    // (for C128) spells them as numpy does.
    let unsigned_wide = matches!(dtype, Dtype::U16 | Dtype::U32 | Dtype::U64);
    DtypeNames {
        dtype,
        torch: Some(torch),
        numpy: Some(numpy),
        ml_dtypes: None,
        tensorflow: Some(numpy),
        paddle: if unsigned_wide { None } else { Some(numpy) },
        mlx: match dtype {
            Dtype::C128 => None,
            Dtype::BOOL => Some("bool_"),
            _ => Some(numpy),
        },
        carrier: None,
    }
}

const fn exotic(dtype: Dtype, torch: Option<&'static str>, ml_dtypes: Option<&'static str>) -> DtypeNames {
    DtypeNames { dtype, torch, numpy: None, ml_dtypes, tensorflow: None, paddle: None, mlx: None, carrier: None }
}

/// Every dtype's names, in [`Dtype::ALL`]'s order.
pub const DTYPE_NAMES: [DtypeNames; 23] = [
    row(Dtype::BOOL, "bool", "bool"),
    exotic(Dtype::F4, Some("float4_e2m1fn_x2"), None),
    exotic(Dtype::F6_E2M3, None, None),
    exotic(Dtype::F6_E3M2, None, None),
    row(Dtype::U8, "uint8", "uint8"),
    row(Dtype::I8, "int8", "int8"),
    DtypeNames {
        paddle: Some("float8_e5m2"),
        carrier: Some("uint8"),
        ..exotic(Dtype::F8_E5M2, Some("float8_e5m2"), Some("float8_e5m2"))
    },
    DtypeNames {
        paddle: Some("float8_e4m3fn"),
        carrier: Some("uint8"),
        ..exotic(Dtype::F8_E4M3, Some("float8_e4m3fn"), Some("float8_e4m3fn"))
    },
    exotic(Dtype::F8_E8M0, Some("float8_e8m0fnu"), Some("float8_e8m0fnu")),
    exotic(Dtype::F8_E4M3FNUZ, Some("float8_e4m3fnuz"), Some("float8_e4m3fnuz")),
    exotic(Dtype::F8_E5M2FNUZ, Some("float8_e5m2fnuz"), Some("float8_e5m2fnuz")),
    row(Dtype::I16, "int16", "int16"),
    row(Dtype::U16, "uint16", "uint16"),
    row(Dtype::F16, "float16", "float16"),
    DtypeNames {
        tensorflow: Some("bfloat16"),
        paddle: Some("bfloat16"),
        mlx: Some("bfloat16"),
        carrier: Some("uint16"),
        ..exotic(Dtype::BF16, Some("bfloat16"), Some("bfloat16"))
    },
    row(Dtype::I32, "int32", "int32"),
    row(Dtype::U32, "uint32", "uint32"),
    row(Dtype::F32, "float32", "float32"),
    row(Dtype::C64, "complex64", "complex64"),
    row(Dtype::F64, "float64", "float64"),
    row(Dtype::I64, "int64", "int64"),
    row(Dtype::U64, "uint64", "uint64"),
    row(Dtype::C128, "complex128", "complex128"),
];

impl Dtype {
    /// Every framework's name for this dtype.
    pub fn names(self) -> &'static DtypeNames {
        // `DTYPE_NAMES` follows `Dtype::ALL`, whose order is the
        // declaration's (checked by a test).
        &DTYPE_NAMES[self as usize]
    }

    /// The dtype torch calls `name` (`"float32"`, `"bfloat16"`), as
    /// distributed checkpoints store it.
    pub fn from_torch_name(name: &str) -> Option<Dtype> {
        DTYPE_NAMES.iter().find(|n| n.torch == Some(name)).map(|n| n.dtype)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_follows_every_dtype_in_order() {
        for (i, d) in Dtype::ALL.iter().enumerate() {
            assert_eq!(DTYPE_NAMES[i].dtype, *d);
            assert_eq!(d.names().dtype, *d);
        }
    }

    #[test]
    fn names_are_unique_per_framework() {
        let columns: [fn(&DtypeNames) -> Option<&'static str>; 6] =
            [|n| n.torch, |n| n.numpy, |n| n.ml_dtypes, |n| n.tensorflow, |n| n.paddle, |n| n.mlx];
        for column in columns {
            let names: alloc::vec::Vec<_> = DTYPE_NAMES.iter().filter_map(column).collect();
            for (i, a) in names.iter().enumerate() {
                assert!(!names[..i].contains(a), "{a} twice");
            }
        }
    }

    #[test]
    fn widths_exotic_and_torch_names() {
        assert_eq!(Dtype::BF16.names().byte_width(), Some(2));
        assert_eq!(Dtype::F4.names().byte_width(), None);
        assert!(Dtype::BF16.names().is_exotic() && Dtype::F8_E4M3.names().is_exotic());
        assert!(!Dtype::F32.names().is_exotic());
        assert_eq!(Dtype::from_torch_name("float8_e4m3fn"), Some(Dtype::F8_E4M3));
        assert_eq!(Dtype::from_torch_name("bool"), Some(Dtype::BOOL));
        assert_eq!(Dtype::from_torch_name("F32"), None);
        assert_eq!(Dtype::from_torch_name("os.system"), None);
        // Paddle has no wide unsigned types; MLX no complex128.
        assert_eq!(Dtype::U32.names().paddle, None);
        assert_eq!(Dtype::C128.names().mlx, None);
        assert_eq!(Dtype::BOOL.names().mlx, Some("bool_"));
    }
}
