//! Figures: latency histograms, and the ratios kept across rounds for the closing summary.

use super::*;

/// Every ratio the rounds printed, by row, in the order they first appeared.
pub(crate) static RATIOS: std::sync::Mutex<Vec<(String, f64)>> = std::sync::Mutex::new(Vec::new());

/// Keeps a ratio for the summary of `--rounds=N`.
pub(crate) fn keep_ratio(what: String, value: Option<f64>) {
    if let (Some(v), Ok(mut ratios)) = (value, RATIOS.lock()) {
        ratios.push((what, v));
    }
}

/// Median and range of each ratio over the rounds: the rows of one round move together with
/// the machine's load, so a ratio taken within a round and summarised over rounds is what can be
/// told apart from noise.
pub(crate) fn print_ratios(rounds: usize) {
    let Ok(ratios) = RATIOS.lock() else { return };
    let mut order: Vec<&str> = Vec::new();
    for (what, _) in ratios.iter() {
        if !order.contains(&what.as_str()) {
            order.push(what);
        }
    }
    println!("## ratios over {rounds} rounds: median [min .. max]");
    for what in order {
        let mut values: Vec<f64> = ratios
            .iter()
            .filter(|(w, _)| w == what)
            .map(|(_, v)| *v)
            .collect();
        values.sort_by(f64::total_cmp);
        let median = if values.len() % 2 == 1 {
            values[values.len() / 2]
        } else {
            (values[values.len() / 2 - 1] + values[values.len() / 2]) / 2.0
        };
        // Ratios print as "1.23x", the CPU figures as milliseconds.
        let unit = if what.contains("ms/") { " ms" } else { "x" };
        println!(
            "{what:<62} {median:>6.2}{unit} [{:.2} .. {:.2}] (n={})",
            values[0],
            values[values.len() - 1],
            values.len()
        );
    }
}

/// Latencies in microseconds, to three significant figures.
pub(crate) fn histogram() -> Histogram<u64> {
    Histogram::new(3).expect("three significant figures are valid")
}

pub(crate) fn record(h: &mut Histogram<u64>, d: Duration) {
    let us = d.as_micros().try_into().unwrap_or(u64::MAX);
    // `record` grows the histogram; `saturating_record` would clamp to its current range.
    if h.record(us).is_err() {
        h.saturating_record(us);
    }
}

/// The `q` quantile of `h`, in ms.
pub(crate) fn quantile_ms(h: &Histogram<u64>, q: f64) -> f64 {
    h.value_at_quantile(q) as f64 / 1e3
}

pub(crate) fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

pub(crate) fn ratio(a: Option<f64>, b: Option<f64>) -> String {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => format!("{:.2}x", a / b),
        _ => "n/a".into(),
    }
}
