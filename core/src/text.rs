//! Numbers as the run folder's text writes them, byte for byte as Python formats them.
//!
//! - [`push_repr`]: a float's `repr` (what `json` writes): the shortest digits that read back to the
//!   same float, in fixed notation for 1e-4 <= |x| < 1e16 (with ".0" when integral), else as
//!   "1e+16" / "1.5e-05".
//! - [`push_g9`]: `"%.9g" % x`, correctly rounded (ties to even on the exact binary value), trailing
//!   zeros dropped, exponent form outside 1e-4 <= |x| < 1e9 (requests.csv's and clients.csv's floats).
//! - [`push_seconds`]: integer nanoseconds as exact decimal seconds ("1.5", "0.0", "-2.000000001").
//! - [`push_us`]: nanoseconds as the float of microseconds Python's `ns / 1000` gives, as its `repr`.
//!
//! Rust's float formatting gives the digits (shortest with `{:e}`, correctly rounded with `{:.Ne}`);
//! the layout around them follows CPython's `float_repr_style = 'short'` rules.

use pyo3::prelude::*;
use std::fmt::Write;

/// Significant digits of requests.csv's and clients.csv's float cells (`%.9g`).
pub const SIGNIFICANT_DIGITS: usize = 9;
/// Integers up to this magnitude convert to f64 exactly (so `n as f64 / 1000.0` is correctly rounded).
const EXACT_INT: i64 = 1 << 53;
/// Nanoseconds below which microseconds' `repr` is their exact decimal (floats under 1e12 are spaced
/// at most 2^-13 apart, well under 0.001).
const EXACT_US_NS: i64 = 1_000_000_000_000_000;

/// Text of at most 64 bytes, formatted on the stack (a float's `{:e}` text; no allocation a number).
pub(crate) struct StackText {
    bytes: [u8; 64],
    len: usize,
}

impl StackText {
    fn of(args: std::fmt::Arguments<'_>) -> Self {
        let mut text = StackText { bytes: [0; 64], len: 0 };
        text.write_fmt(args).expect("a float's text fits in 64 bytes");
        text
    }

    pub(crate) fn as_str(&self) -> &str {
        std::str::from_utf8(&self.bytes[..self.len]).expect("formatted text is UTF-8")
    }
}

impl Write for StackText {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        let end = self.len + s.len();
        if end > self.bytes.len() {
            return Err(std::fmt::Error);
        }
        self.bytes[self.len..end].copy_from_slice(s.as_bytes());
        self.len = end;
        Ok(())
    }
}

/// (negative, digits, decimal exponent of the first digit) of Rust's `{:e}` text of a finite float,
/// e.g. "-1.25e-3" -> (true, "125", -3); `digits` is a buffer the digits are copied into.
fn split_exp<'a>(text: &str, digits: &'a mut StackText) -> (bool, &'a str, i32) {
    let (negative, text) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text),
    };
    let (mantissa, exponent) = text.split_once('e').expect("{:e} text has an exponent");
    for part in mantissa.split('.') {
        digits.write_str(part).expect("digits fit");
    }
    (negative, digits.as_str(), exponent.parse().expect("{:e} exponent is an integer"))
}

/// Python's exponent suffix: "e+16", "e-05" (sign always, at least two digits).
fn push_exponent(out: &mut String, exponent: i32) {
    let sign = if exponent < 0 { '-' } else { '+' };
    let _ = write!(out, "e{sign}{:02}", exponent.unsigned_abs());
}

/// `digits` (the first one before the point) with the point placed for decimal exponent `exponent`,
/// in fixed notation; `point_zero` writes ".0" after an integral value (repr), else nothing (%g).
fn push_fixed(out: &mut String, digits: &str, exponent: i32, point_zero: bool) {
    if exponent < 0 {
        out.push_str("0.");
        out.extend(std::iter::repeat_n('0', (-exponent - 1) as usize));
        out.push_str(digits);
        return;
    }
    let whole = exponent as usize + 1;
    if digits.len() <= whole {
        out.push_str(digits);
        out.extend(std::iter::repeat_n('0', whole - digits.len()));
        if point_zero {
            out.push_str(".0");
        }
    } else {
        out.push_str(&digits[..whole]);
        out.push('.');
        out.push_str(&digits[whole..]);
    }
}

/// `d[.ddd]e±XX`.
fn push_scientific(out: &mut String, digits: &str, exponent: i32) {
    out.push_str(&digits[..1]);
    if digits.len() > 1 {
        out.push('.');
        out.push_str(&digits[1..]);
    }
    push_exponent(out, exponent);
}

/// Python's text of a float that is not finite ("nan", "inf", "-inf"); None for a finite one.
fn non_finite(x: f64) -> Option<&'static str> {
    match x {
        _ if x.is_nan() => Some("nan"),
        _ if x.is_infinite() => Some(if x > 0.0 { "inf" } else { "-inf" }),
        _ => None,
    }
}

/// Appends Python's `repr(x)`.
pub fn push_repr(out: &mut String, x: f64) {
    if let Some(text) = non_finite(x) {
        out.push_str(text);
        return;
    }
    // Python's repr is the shortest string that reads back to x, and of two such strings the nearer
    // to x (ties to even); Rust's `{:e}` gives a shortest one, not always that. So x is rounded to
    // that many digits (ties to even) and kept where it reads back: where it does not (x a power of
    // two, whose lower neighbour is nearer), `{:e}`'s is the only shortest one.
    let shortest = StackText::of(format_args!("{x:e}"));
    let mut shortest_digits = StackText::of(format_args!(""));
    let precision = split_exp(shortest.as_str(), &mut shortest_digits).1.len() - 1;
    let rounded = StackText::of(format_args!("{x:.precision$e}"));
    let text = if rounded.as_str().parse::<f64>() == Ok(x) { rounded } else { shortest };
    let mut digits = StackText::of(format_args!(""));
    let (negative, digits, exponent) = split_exp(text.as_str(), &mut digits);
    if negative {
        out.push('-');
    }
    if (-4..16).contains(&exponent) {
        push_fixed(out, digits, exponent, true);
    } else {
        push_scientific(out, digits, exponent);
    }
}

/// Appends the text `json` writes for a float: its `repr`, or NaN / Infinity / -Infinity.
pub fn push_json_float(out: &mut String, x: f64) {
    if x.is_nan() {
        out.push_str("NaN");
    } else if x.is_infinite() {
        out.push_str(if x > 0.0 { "Infinity" } else { "-Infinity" });
    } else {
        push_repr(out, x);
    }
}

/// Appends Python's `"%.9g" % x` ([`SIGNIFICANT_DIGITS`]).
pub fn push_g9(out: &mut String, x: f64) {
    if let Some(text) = non_finite(x) {
        out.push_str(text);
        return;
    }
    let text = StackText::of(format_args!("{x:.prec$e}", prec = SIGNIFICANT_DIGITS - 1));
    let mut digits = StackText::of(format_args!(""));
    let (negative, digits, exponent) = split_exp(text.as_str(), &mut digits);
    let digits = digits.trim_end_matches('0');
    let digits = if digits.is_empty() { "0" } else { digits };
    if negative {
        out.push('-');
    }
    if (-4..SIGNIFICANT_DIGITS as i32).contains(&exponent) {
        push_fixed(out, digits, exponent, false);
    } else {
        push_scientific(out, digits, exponent);
    }
}

/// Appends `n / 10^places` exactly in decimal: the whole part, ".", the fraction without trailing
/// zeros ("0" when there is none).
fn push_decimal(out: &mut String, n: i64, places: u32) {
    if n < 0 {
        out.push('-');
    }
    let scale = 10u64.pow(places);
    let magnitude = n.unsigned_abs();
    push_uint(out, magnitude / scale);
    out.push('.');
    let mut fraction = magnitude % scale;
    if fraction == 0 {
        out.push('0');
        return;
    }
    let mut width = places as usize;
    while fraction.is_multiple_of(10) {
        fraction /= 10;
        width -= 1;
    }
    let digits = decimal_digits(fraction);
    out.extend(std::iter::repeat_n('0', width - digits.len));
    out.push_str(digits.as_str());
}

/// A number's decimal digits, on the stack.
pub(crate) fn decimal_digits(mut n: u64) -> StackText {
    let mut bytes = [0u8; 20];
    let mut start = bytes.len();
    loop {
        start -= 1;
        bytes[start] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    let mut text = StackText::of(format_args!(""));
    text.bytes[..bytes.len() - start].copy_from_slice(&bytes[start..]);
    text.len = bytes.len() - start;
    text
}

/// Appends `n` in decimal (as `str(n)`; without the formatting machinery: a row has dozens).
fn push_uint(out: &mut String, n: u64) {
    out.push_str(decimal_digits(n).as_str());
}

/// Appends `n` in decimal, as Python's `str(n)`.
pub fn push_int(out: &mut String, n: i64) {
    if n < 0 {
        out.push('-');
    }
    push_uint(out, n.unsigned_abs());
}

/// Appends exact decimal seconds of `ns`: 1_500_000_000 -> "1.5", 0 -> "0.0".
pub fn push_seconds(out: &mut String, ns: i64) {
    push_decimal(out, ns, 9);
}

/// Microseconds of `ns` as Python's `ns / 1000` (the correctly rounded quotient).
pub fn us(py: Python<'_>, ns: i64) -> PyResult<f64> {
    if (-EXACT_INT..=EXACT_INT).contains(&ns) {
        return Ok(ns as f64 / 1000.0); // both exact: IEEE division rounds as Python's int division does
    }
    ns.into_pyobject(py)?.call_method1("__truediv__", (1000,))?.extract()
}

/// Appends the `repr` of microseconds of `ns` (trace.json's times), Python's `repr(ns / 1000)`.
///
/// Below [`EXACT_US_NS`] in magnitude that is the exact decimal `ns / 1000` (the float's spacing is
/// under 0.001 there, so no other decimal of at most three places rounds to it, and none with more
/// places is shorter), written without formatting a float.
pub fn push_us(py: Python<'_>, out: &mut String, ns: i64) -> PyResult<()> {
    if (-EXACT_US_NS..EXACT_US_NS).contains(&ns) {
        push_decimal(out, ns, 3);
        return Ok(());
    }
    push_json_float(out, us(py, ns)?);
    Ok(())
}

/// `repr(x)`, from the core (tests compare it with Python's).
#[pyfunction]
pub fn float_repr(x: f64) -> String {
    let mut out = String::new();
    push_repr(&mut out, x);
    out
}

/// CSV text of a float: empty for NaN, else `"%.9g" % x`.
#[pyfunction]
pub fn float_text(x: f64) -> String {
    let mut out = String::new();
    if !x.is_nan() {
        push_g9(&mut out, x);
    }
    out
}

/// Exact decimal seconds of an integer nanosecond count: 1_500_000_000 -> "1.5".
#[pyfunction]
pub fn ns_to_s_text(ns: i64) -> String {
    let mut out = String::new();
    push_seconds(&mut out, ns);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repr_matches_python_layout() {
        for (x, text) in [
            (0.0, "0.0"),
            (-0.0, "-0.0"),
            (1.0, "1.0"),
            (200000.0, "200000.0"),
            (0.1, "0.1"),
            (1e-4, "0.0001"),
            (1.5e-5, "1.5e-05"),
            (1e16, "1e+16"),
            (9999999999999998.0, "9999999999999998.0"),
            (1.2345e22, "1.2345e+22"),
            (-3.25e-300, "-3.25e-300"),
            (123.456, "123.456"),
            (562949953421312.25, "562949953421312.2"),
            (5.9604644775390625e-08, "5.960464477539063e-08"),
            (f64::INFINITY, "inf"),
        ] {
            assert_eq!(float_repr(x), text, "{x}");
        }
    }

    #[test]
    fn g9_matches_python_layout() {
        for (x, text) in [
            (0.0, "0"),
            (-0.0, "-0"),
            (1.0, "1"),
            (0.2, "0.2"),
            (2.5, "2.5"),
            (1.0 / 3.0, "0.333333333"),
            (123456789.0, "123456789"),
            (1234567890.0, "1.23456789e+09"),
            (1e-4, "0.0001"),
            (1.23456789012e-5, "1.23456789e-05"),
            (999999999.5, "1e+09"),
            (0.00012345678951, "0.00012345679"),
            (f64::NAN, ""),
        ] {
            assert_eq!(float_text(x), text, "{x}");
        }
    }

    #[test]
    fn ints_are_decimal() {
        for n in [0, 1, -1, 9, 10, 1234567890, i64::MIN, i64::MAX] {
            let mut out = String::new();
            push_int(&mut out, n);
            assert_eq!(out, n.to_string());
        }
    }

    #[test]
    fn seconds_are_exact() {
        for (ns, text) in [
            (0, "0.0"),
            (1_500_000_000, "1.5"),
            (1, "0.000000001"),
            (-2_000_000_001, "-2.000000001"),
            (-5, "-0.000000005"),
            (i64::MIN, "-9223372036.854775808"),
            (i64::MAX, "9223372036.854775807"),
            (10, "0.00000001"),
        ] {
            assert_eq!(ns_to_s_text(ns), text, "{ns}");
        }
    }
}
