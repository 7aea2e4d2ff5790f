//! `deathtensors cat`: a tensor's values, summarised the way numpy prints
//! them, or its raw bytes.

use std::io::Write;

use anyhow::bail;
use deathtensors_io::format::{Dtype, TensorInfo};
use deathtensors_io::Reader;
use serde_json::{json, Value as Json};

use crate::args::CatArgs;
use crate::context::RunContext;
use crate::copy;
use crate::exit::ExitCode;
use crate::out::Out;
use deathtensors_io::values::{self, Value};

/// numpy's `threshold`: tensors with more elements are summarised.
const THRESHOLD: u64 = 1000;
/// numpy's `edgeitems`: elements shown at each end of a summarised axis.
const EDGE: u64 = 3;
/// numpy's `linewidth`.
const LINE_WIDTH: usize = 75;
/// Bytes read at a time: summaries read a few elements here and there,
/// `--full` reads sequentially.
const WINDOW: usize = 64 << 10;

pub fn run(args: CatArgs, ctx: &RunContext) -> anyhow::Result<ExitCode> {
    let input = crate::sharded::Input::open(ctx, &args.file)?;
    let reader = input.reader_of(&args.name)?;
    let t = reader.tensor(&args.name)?.info.clone();
    // Checked whole before a value is printed (the values are read in
    // windows, here and there).
    crate::integrity::check(reader, &[t.name.as_str()])?;
    let mut out = Out::new();
    if args.raw {
        let mut buf = vec![0u8; copy::CHUNK.min(t.byte_len() as usize)];
        let mut at = 0u64;
        while at < t.byte_len() {
            let n = (t.byte_len() - at).min(buf.len() as u64) as usize;
            reader.read_range_into(&t.name, at, &mut buf[..n])?;
            out.write_all(&buf[..n])?;
            at += n as u64;
        }
        out.finish()?;
        return Ok(ExitCode::Success);
    }
    let Some(size) = values::element_size(t.dtype) else {
        bail!(
            "cannot print tensor {:?}: {} is a packed sub-byte dtype, {}; use --raw for its bytes",
            t.name,
            t.dtype,
            values::SUB_BYTE
        );
    };
    let summarise = !args.full && t.numel() > THRESHOLD;
    let mut elements = Elements { reader, tensor: &t, size, buf: Vec::new(), start: 0 };
    let strides = strides(&t.shape);
    let axes = Axes { shape: &t.shape, strides: &strides, summarise };
    if args.json {
        let values = json_values(&mut elements, &axes, 0, 0)?;
        out.json(&json!({
            "name": t.name,
            "dtype": t.dtype.name(),
            "shape": t.shape,
            "summarised": summarise,
            "values": values,
        }))?;
    } else {
        let mut measure = Measure::default();
        axes.visit(0, 0, &mut |i| {
            measure.add(elements.get(i)?, t.dtype);
            Ok(())
        })?;
        let style = measure.style();
        let mut printer = Printer { out: &mut out, col: 0 };
        if t.numel() == 0 {
            printer.put("[]")?;
        } else {
            printer.text(&mut elements, &axes, &style, 0, 0)?;
        }
        printer.put("\n")?;
    }
    out.finish()?;
    Ok(ExitCode::Success)
}

/// Row-major strides, in elements.
fn strides(shape: &[u64]) -> Vec<u64> {
    let mut strides = vec![1u64; shape.len()];
    for k in (0..shape.len().saturating_sub(1)).rev() {
        strides[k] = strides[k + 1] * shape[k + 1];
    }
    strides
}

/// Reads elements by index through a small window of the tensor's bytes.
struct Elements<'a> {
    reader: &'a Reader,
    tensor: &'a TensorInfo,
    size: usize,
    buf: Vec<u8>,
    /// The index of the first element in `buf`.
    start: u64,
}

impl Elements<'_> {
    fn get(&mut self, i: u64) -> anyhow::Result<Value> {
        let have = (self.buf.len() / self.size) as u64;
        if i < self.start || i >= self.start + have {
            let n = ((WINDOW / self.size) as u64).max(1).min(self.tensor.numel() - i) as usize;
            self.buf.resize(n * self.size, 0);
            self.reader.read_range_into(&self.tensor.name, i * self.size as u64, &mut self.buf)?;
            self.start = i;
        }
        let at = (i - self.start) as usize * self.size;
        values::value(self.tensor.dtype, &self.buf[at..]).ok_or_else(|| anyhow::anyhow!(values::SUB_BYTE))
    }
}

/// The shape being printed, and whether its long axes are summarised.
struct Axes<'a> {
    shape: &'a [u64],
    strides: &'a [u64],
    summarise: bool,
}

impl Axes<'_> {
    /// The indices shown along an axis: all of them, or the first and last
    /// [`EDGE`] with a gap (`None`) between.
    fn shown(&self, depth: usize) -> Box<dyn Iterator<Item = Option<u64>>> {
        let n = self.shape[depth];
        if self.summarise && n > 2 * EDGE {
            Box::new((0..EDGE).map(Some).chain(std::iter::once(None)).chain((n - EDGE..n).map(Some)))
        } else {
            Box::new((0..n).map(Some))
        }
    }

    /// Calls `f` with the flat index of every element shown, in order.
    fn visit(&self, depth: usize, base: u64, f: &mut dyn FnMut(u64) -> anyhow::Result<()>) -> anyhow::Result<()> {
        if depth == self.shape.len() {
            return f(base);
        }
        for i in self.shown(depth).flatten() {
            self.visit(depth + 1, base + i * self.strides[depth], f)?;
        }
        Ok(())
    }
}

fn json_values(elements: &mut Elements, axes: &Axes, depth: usize, base: u64) -> anyhow::Result<Json> {
    if depth == axes.shape.len() {
        return Ok(json_value(elements.get(base)?));
    }
    let mut items = Vec::new();
    for i in axes.shown(depth) {
        items.push(match i {
            Some(i) => json_values(elements, axes, depth + 1, base + i * axes.strides[depth])?,
            None => "...".into(),
        });
    }
    Ok(items.into())
}

fn json_float(x: f64) -> Json {
    match serde_json::Number::from_f64(x) {
        Some(n) => n.into(),
        None if x.is_nan() => "nan".into(),
        None if x > 0.0 => "inf".into(),
        None => "-inf".into(),
    }
}

fn json_value(v: Value) -> Json {
    match v {
        Value::Bool(b) => b.into(),
        Value::Unsigned(n) => n.into(),
        Value::Signed(n) => n.into(),
        Value::Float(x) => json_float(x),
        Value::Complex(re, im) => json!([json_float(re), json_float(im)]),
    }
}

/// The shortest decimal that reads back as `x` in `dtype`, as numpy prints
/// floats (so a BF16 0.1 prints as 0.1, not as its exact 0.10009765625).
fn shortest(x: f64, dtype: Dtype) -> f64 {
    fn search(x: f64, same: impl Fn(f64) -> bool) -> f64 {
        (0..17).filter_map(|p| format!("{x:.p$e}").parse::<f64>().ok()).find(|&y| same(y)).unwrap_or(x)
    }
    match dtype {
        Dtype::F32 | Dtype::C64 => (x as f32).to_string().parse().unwrap_or(x),
        Dtype::F16 => search(x, |y| half::f16::from_f64(y).to_f64() == x),
        Dtype::BF16 => search(x, |y| half::bf16::from_f64(y).to_f64() == x),
        // Doubles print as they are, and 8-bit floats are exact in a few digits.
        _ => x,
    }
}

/// A float as `(integer part, fraction digits)` in positional notation, and
/// as `(mantissa's integer part, mantissa's fraction digits, exponent)`.
fn float_parts(y: f64) -> ((String, String), (String, String, i32)) {
    let fixed = y.to_string();
    let (int, frac) = fixed.split_once('.').unwrap_or((&fixed, ""));
    let sci = format!("{y:e}");
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let (lead, mfrac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    ((int.to_string(), frac.to_string()), (lead.to_string(), mfrac.to_string(), exp.parse().unwrap_or(0)))
}

fn exponent(e: i32) -> String {
    format!("e{}{:02}", if e < 0 { '-' } else { '+' }, e.abs())
}

/// What the shown floats need: widths, and numpy's choice of notation.
#[derive(Debug, Default)]
struct FloatMeasure {
    /// Over the finite non-zero values.
    max_abs: f64,
    min_abs: f64,
    fixed_int: usize,
    fixed_frac: usize,
    sci_lead: usize,
    sci_frac: usize,
    sci_exp: usize,
    special: usize,
}

impl FloatMeasure {
    fn add(&mut self, x: f64, dtype: Dtype) {
        if !x.is_finite() {
            self.special = self.special.max(if x == f64::NEG_INFINITY { 4 } else { 3 });
            return;
        }
        if x != 0.0 {
            let a = x.abs();
            self.min_abs = if self.max_abs == 0.0 { a } else { self.min_abs.min(a) };
            self.max_abs = self.max_abs.max(a);
        }
        let ((int, frac), (lead, mfrac, exp)) = float_parts(shortest(x, dtype));
        self.fixed_int = self.fixed_int.max(int.len());
        self.fixed_frac = self.fixed_frac.max(frac.len());
        self.sci_lead = self.sci_lead.max(lead.len());
        self.sci_frac = self.sci_frac.max(mfrac.len());
        self.sci_exp = self.sci_exp.max(exponent(exp).len());
    }

    fn style(&self) -> FloatStyle {
        // numpy's rule for scientific notation.
        let sci =
            self.max_abs >= 1e8 || (self.max_abs > 0.0 && (self.min_abs < 1e-4 || self.max_abs / self.min_abs > 1e3));
        let (frac, width) = if sci {
            (self.sci_frac, self.sci_lead + 1 + self.sci_frac + self.sci_exp)
        } else {
            (self.fixed_frac, self.fixed_int + 1 + self.fixed_frac)
        };
        FloatStyle { sci, frac, width: width.max(self.special) }
    }
}

/// How to print floats.
#[derive(Debug)]
struct FloatStyle {
    sci: bool,
    frac: usize,
    width: usize,
}

impl FloatStyle {
    /// `x` in the chosen notation, unpadded on the left.
    fn format(&self, x: f64, dtype: Dtype) -> String {
        if x.is_nan() {
            return "nan".into();
        }
        if x.is_infinite() {
            return if x > 0.0 { "inf" } else { "-inf" }.into();
        }
        let ((int, frac), (lead, mfrac, exp)) = float_parts(shortest(x, dtype));
        if self.sci {
            // numpy pads the mantissas' digits with zeros.
            format!("{lead}.{mfrac:0<w$}{}", exponent(exp), w = self.frac)
        } else {
            // ... and positional fractions with spaces, aligning the points.
            format!("{int}.{frac:<w$}", w = self.frac)
        }
    }
}

/// What the shown values need.
#[derive(Debug, Default)]
struct Measure {
    int_width: usize,
    bool_seen: bool,
    /// Real numbers, and the real parts of complex ones.
    re: FloatMeasure,
    /// The magnitudes of the imaginary parts.
    im: Option<FloatMeasure>,
}

impl Measure {
    fn add(&mut self, v: Value, dtype: Dtype) {
        match v {
            Value::Bool(_) => self.bool_seen = true,
            Value::Unsigned(n) => self.int_width = self.int_width.max(n.to_string().len()),
            Value::Signed(n) => self.int_width = self.int_width.max(n.to_string().len()),
            Value::Float(x) => self.re.add(x, dtype),
            Value::Complex(re, im) => {
                self.re.add(re, dtype);
                self.im.get_or_insert_with(FloatMeasure::default).add(im.abs(), dtype);
            }
        }
    }

    fn style(&self) -> Style {
        let re = self.re.style();
        let im = self.im.as_ref().map(FloatMeasure::style);
        let width = match &im {
            _ if self.bool_seen => 5,
            // The real part, the sign, the imaginary part and `j`.
            Some(im) => re.width + 1 + im.width + 1,
            None => self.int_width.max(re.width),
        };
        Style { width, re, im }
    }
}

/// How to print every value of a tensor.
#[derive(Debug)]
struct Style {
    width: usize,
    re: FloatStyle,
    im: Option<FloatStyle>,
}

impl Style {
    fn value(&self, v: Value, dtype: Dtype) -> String {
        let s = match v {
            Value::Bool(b) => if b { "True" } else { "False" }.to_string(),
            Value::Unsigned(n) => n.to_string(),
            Value::Signed(n) => n.to_string(),
            Value::Float(x) => self.re.format(x, dtype),
            Value::Complex(re, im) => {
                // As numpy: `-0.91+0.06j`, each part aligned, padding after the `j`.
                let sign = if im.is_sign_negative() && !im.is_nan() { '-' } else { '+' };
                let re = format!("{:>w$}", self.re.format(re, dtype), w = self.re.width);
                let im_style = self.im.as_ref().unwrap_or(&self.re);
                let im = format!("{}j", im_style.format(im.abs(), dtype).trim_end());
                return format!("{re}{sign}{im:<w$}", w = im_style.width + 1);
            }
        };
        format!("{s:>w$}", w = self.width)
    }
}

/// Writes nested brackets as numpy does, wrapping long rows.
struct Printer<'a> {
    out: &'a mut Out,
    col: usize,
}

impl Printer<'_> {
    fn put(&mut self, s: &str) -> std::io::Result<()> {
        match s.rfind('\n') {
            Some(i) => self.col = s.len() - i - 1,
            None => self.col += s.len(),
        }
        self.out.write_all(s.as_bytes())
    }

    fn text(
        &mut self,
        elements: &mut Elements,
        axes: &Axes,
        style: &Style,
        depth: usize,
        base: u64,
    ) -> anyhow::Result<()> {
        let ndim = axes.shape.len();
        if ndim == 0 {
            let v = elements.get(0)?;
            self.put(style.value(v, elements.tensor.dtype).trim_start())?;
            return Ok(());
        }
        self.put("[")?;
        let mut first = true;
        for i in axes.shown(depth) {
            if depth + 1 == ndim {
                let s = match i {
                    Some(i) => style.value(elements.get(base + i * axes.strides[depth])?, elements.tensor.dtype),
                    None => "...".to_string(),
                };
                if !first {
                    if self.col + 1 + s.len() + 1 > LINE_WIDTH {
                        self.put("\n")?;
                        self.put(&" ".repeat(depth + 1))?;
                    } else {
                        self.put(" ")?;
                    }
                }
                self.put(&s)?;
            } else {
                if !first {
                    self.put(&"\n".repeat(ndim - depth - 1))?;
                    self.put(&" ".repeat(depth + 1))?;
                }
                match i {
                    Some(i) => self.text(elements, axes, style, depth + 1, base + i * axes.strides[depth])?,
                    None => self.put("...")?,
                }
            }
            first = false;
        }
        self.put("]")?;
        Ok(())
    }
}
