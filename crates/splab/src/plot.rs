//! Plots of the commands' documents, as SVG text from plotters' SVG
//! backend: `--plot FILE.svg` writes a run's one plot, `splab report`
//! puts every plot of its documents in one page. Each plot is titled with
//! the command line that made it and has both axes named with their unit.
//!
//! plotters draws the axes, grids, lines and legends and escapes the text
//! it writes; what it has no chart type for (categories along an axis,
//! boxes with whiskers, labels over bars) is drawn here from its elements.

use crate::doc::{self, Bench, Compare, Doc, LatCurve, Native, RssSample, Sim, Spread, Validate};
use splab_hw::size;
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

/// One plot: its title (the command line) and the SVG text.
pub struct Plot {
    pub title: String,
    pub svg: String,
}

const SIZE: (u32, u32) = (760, 440);
const FONT: &str = "sans-serif";
/// The band around y = x drawn on validate's plot: a prediction within
/// 10 % of the measured speedup (the largest error the validation targets
/// allow a speedup cell).
pub const BAND: f64 = 0.10;

type Area<'a> = DrawingArea<SVGBackend<'a>, Shift>;

fn err<E: std::fmt::Display>(e: E) -> String {
    format!("drawing a plot: {e}")
}

/// Runs `draw` on a fresh white canvas and returns the SVG text.
fn svg(title: &str, draw: impl FnOnce(&Area, &str) -> Result<(), String>) -> Result<Plot, String> {
    let mut text = String::new();
    {
        let root = SVGBackend::with_string(&mut text, SIZE).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        draw(&root, title)?;
        root.present().map_err(err)?;
    }
    Ok(Plot { title: title.to_string(), svg: text })
}

/// The title's font size: smaller for long command lines, so that they
/// fit the plot's width.
fn title_size(title: &str) -> f64 {
    let fit = SIZE.0 as f64 * 1.45 / title.len().max(1) as f64;
    fit.clamp(9.0, 15.0)
}

fn colour(i: usize) -> RGBColor {
    // Distinct on white and for the common forms of colour blindness
    // (Okabe and Ito's palette), then plotters' own.
    const C: [RGBColor; 8] = [
        RGBColor(0, 114, 178),
        RGBColor(213, 94, 0),
        RGBColor(0, 158, 115),
        RGBColor(204, 121, 167),
        RGBColor(230, 159, 0),
        RGBColor(86, 180, 233),
        RGBColor(120, 120, 120),
        RGBColor(0, 0, 0),
    ];
    if i < C.len() {
        C[i]
    } else {
        let (r, g, b) = Palette99::pick(i).rgb();
        RGBColor(r, g, b)
    }
}

/// Names under each category of a chart whose x axis runs over
/// categories 0..n (category i centred at i + 0.5).
fn category_labels<Y: Ranged<ValueType = f64>>(
    root: &Area,
    chart: &ChartContext<SVGBackend, Cartesian2d<plotters::coord::types::RangedCoordf64, Y>>,
    labels: &[String],
    y0: f64,
) -> Result<(), String> {
    let style = TextStyle::from((FONT, 13)).pos(Pos::new(HPos::Center, VPos::Top));
    for (i, l) in labels.iter().enumerate() {
        let (px, py) = chart.backend_coord(&(i as f64 + 0.5, y0));
        root.draw(&Text::new(l.clone(), (px, py + 6), style.clone())).map_err(err)?;
    }
    Ok(())
}

/// A chart on `root` titled `title`, with room for the axes' labels.
fn builder<'a, 'b>(root: &'a Area<'b>, title: &str, x_area: u32, y_area: u32) -> ChartBuilder<'a, 'b, SVGBackend<'b>> {
    let mut b = ChartBuilder::on(root);
    b.caption(title, (FONT, title_size(title))).margin(12).x_label_area_size(x_area).y_label_area_size(y_area);
    b
}

/// A chart over categories 0..n along x (names drawn by
/// `category_labels`) and `y` up the side, named `y_desc`.
fn category_chart<'a, 'b>(
    root: &'a Area<'b>,
    title: &str,
    n: usize,
    y: std::ops::Range<f64>,
    y_area: u32,
    y_desc: &str,
) -> Result<ChartContext<'a, SVGBackend<'b>, Cartesian2d<plotters::coord::types::RangedCoordf64, plotters::coord::types::RangedCoordf64>>, String> {
    let mut chart = builder(root, title, 48, y_area).build_cartesian_2d(0f64..n as f64, y).map_err(err)?;
    chart.configure_mesh().disable_x_mesh().x_labels(0).y_desc(y_desc).label_style((FONT, 12)).draw().map_err(err)?;
    Ok(chart)
}

/// The legend of the series drawn with labels, at `pos`.
fn legend<'a, 'b: 'a, CT: CoordTranslate>(chart: &mut ChartContext<'a, SVGBackend<'b>, CT>, pos: SeriesLabelPosition) -> Result<(), String> {
    chart.configure_series_labels().position(pos).background_style(WHITE.mix(0.85)).border_style(BLACK).label_font((FONT, 12)).draw().map_err(err)
}

/// An array size in MB as lmbench's sizes read (4K, 1.5M, 256M).
fn mb_label(mb: f64) -> String {
    size::show((mb * (1u64 << 20) as f64).round() as u64).replace("iB", "").replace(' ', "")
}

/// One latency curve as drawn: its legend, colour and whether dashed.
pub struct Line {
    pub label: String,
    pub curve: LatCurve,
    pub colour: usize,
    pub dashed: bool,
}

/// Latency curves: ns a load against the array size (log scale).
pub fn lat(title: &str, lines: &[Line]) -> Result<Plot, String> {
    let pts = || lines.iter().flat_map(|l| l.curve.points.iter().copied());
    let (xmin, xmax) = pts().fold((f64::INFINITY, 0f64), |(a, b), (x, _)| (a.min(x), b.max(x)));
    let ymax = pts().fold(0f64, |a, (_, y)| a.max(y));
    if !(xmin.is_finite() && xmax > 0.0) {
        return Err("no latency points to plot".into());
    }
    svg(title, |root, title| {
        let mut chart = builder(root, title, 40, 56).build_cartesian_2d((xmin * 0.9..xmax * 1.1).log_scale().base(4.0), 0f64..ymax * 1.08).map_err(err)?;
        chart
            .configure_mesh()
            .x_labels(12)
            .x_desc("array size (log scale)")
            .y_desc("ns per load")
            .x_label_formatter(&|x| mb_label(*x))
            .label_style((FONT, 12))
            .draw()
            .map_err(err)?;
        for l in lines {
            let col = colour(l.colour);
            let style = col.stroke_width(2);
            let pts = l.curve.points.iter().copied();
            let series = if l.dashed {
                chart.draw_series(DashedLineSeries::new(pts, 6, 4, style))
            } else {
                chart.draw_series(LineSeries::new(pts, style))
            };
            let dashed = l.dashed;
            series.map_err(err)?.label(l.label.clone()).legend(move |(x, y)| {
                let end = if dashed { x + 7 } else { x + 18 };
                PathElement::new(vec![(x, y), (end, y)], style)
            });
            chart.draw_series(l.curve.points.iter().map(|&p| Circle::new(p, 2, col.filled()))).map_err(err)?;
        }
        legend(&mut chart, SeriesLabelPosition::UpperLeft)
    })
}

/// One line of `axis_lines`: its legend and a value per category (None
/// where the sweep has no run there).
pub struct Series {
    pub label: String,
    pub values: Vec<Option<f64>>,
}

/// A sweep's figure against one of its axes: the axis's values along x
/// (as categories, in the sweep's order), a line per series.
pub fn axis_lines(title: &str, x_desc: &str, y_desc: &str, cats: &[String], series: &[Series]) -> Result<Plot, String> {
    let ymax = series.iter().flat_map(|s| s.values.iter().flatten()).fold(0f64, |a, &y| a.max(y));
    if cats.is_empty() || ymax <= 0.0 || !ymax.is_finite() {
        return Err(format!("no values of {y_desc} to plot"));
    }
    svg(title, |root, title| {
        let mut chart = category_chart(root, title, cats.len(), 0f64..ymax * 1.15, 64, y_desc)?;
        for (k, s) in series.iter().enumerate() {
            let col = colour(k);
            let pts: Vec<(f64, f64)> = s.values.iter().enumerate().filter_map(|(i, v)| v.map(|y| (i as f64 + 0.5, y))).collect();
            chart
                .draw_series(LineSeries::new(pts.iter().copied(), col.stroke_width(2)))
                .map_err(err)?
                .label(s.label.clone())
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], col.stroke_width(2)));
            chart.draw_series(pts.iter().map(|&p| Circle::new(p, 3, col.filled()))).map_err(err)?;
        }
        if series.len() > 1 || !series[0].label.is_empty() {
            legend(&mut chart, SeriesLabelPosition::UpperRight)?;
        }
        category_labels(root, &chart, cats, 0.0)?;
        let style = TextStyle::from((FONT, 13)).pos(Pos::new(HPos::Center, VPos::Bottom));
        root.draw(&Text::new(x_desc.to_string(), (SIZE.0 as i32 / 2, SIZE.1 as i32 - 4), style)).map_err(err)
    })
}

/// One compared quantity: its name, the off and on values.
pub struct Pair {
    pub name: String,
    pub off: f64,
    pub on: f64,
}

/// Bars of each quantity with superpages on as a share of off (off is
/// 100 %), the change written over each.
pub fn change_bars(title: &str, pairs: &[Pair]) -> Result<Plot, String> {
    let pairs: Vec<&Pair> = pairs.iter().filter(|p| p.off > 0.0 && p.on.is_finite()).collect();
    if pairs.is_empty() {
        return Err("nothing to compare: every quantity is 0 with superpages off".into());
    }
    let pct = |p: &Pair| 100.0 * p.on / p.off;
    let ymax = pairs.iter().map(|p| pct(p)).fold(100f64, f64::max) * 1.35;
    svg(title, |root, title| {
        let mut chart = category_chart(root, title, pairs.len(), 0f64..ymax, 56, "superpages on, % of off")?;
        let (off_c, on_c) = (RGBColor(170, 170, 170), colour(0));
        chart
            .draw_series(pairs.iter().enumerate().map(|(i, _)| Rectangle::new([(i as f64 + 0.12, 0.0), (i as f64 + 0.48, 100.0)], off_c.filled())))
            .map_err(err)?
            .label("superpages off (100 %)")
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 14, y + 5)], off_c.filled()));
        chart
            .draw_series(pairs.iter().enumerate().map(|(i, p)| Rectangle::new([(i as f64 + 0.52, 0.0), (i as f64 + 0.88, pct(p))], on_c.filled())))
            .map_err(err)?
            .label("superpages on")
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 14, y + 5)], on_c.filled()));
        let above = TextStyle::from((FONT, 12)).pos(Pos::new(HPos::Center, VPos::Bottom));
        chart
            .draw_series(pairs.iter().enumerate().map(|(i, p)| {
                Text::new(crate::output::change(p.off, p.on), (i as f64 + 0.7, pct(p) + ymax * 0.01), above.clone())
            }))
            .map_err(err)?;
        legend(&mut chart, SeriesLabelPosition::UpperRight)?;
        let labels: Vec<String> = pairs.iter().map(|p| p.name.clone()).collect();
        category_labels(root, &chart, &labels, 0.0)
    })
}

/// Per category, a box from the first to the third quartile, whiskers to
/// the extremes and a bar at the median; `note` is written over each.
pub fn spreads(title: &str, y_desc: &str, cats: &[(String, Spread, String)]) -> Result<Plot, String> {
    if cats.is_empty() {
        return Err("no runs to plot".into());
    }
    let lo = cats.iter().map(|c| c.1.min).fold(f64::INFINITY, f64::min);
    let hi = cats.iter().map(|c| c.1.max).fold(0f64, f64::max);
    let pad = ((hi - lo) * 0.25).max(hi.abs() * 0.02).max(1e-12);
    let (y0, y1) = ((lo - pad).max(0.0), hi + pad);
    svg(title, |root, title| {
        let mut chart = category_chart(root, title, cats.len(), y0..y1, 64, y_desc)?;
        for (i, (_, s, note)) in cats.iter().enumerate() {
            let x = i as f64 + 0.5;
            let c = colour(i);
            chart.draw_series(std::iter::once(Rectangle::new([(x - 0.18, s.q1), (x + 0.18, s.q3)], c.mix(0.35).filled()))).map_err(err)?;
            chart.draw_series(std::iter::once(Rectangle::new([(x - 0.18, s.q1), (x + 0.18, s.q3)], c.stroke_width(1)))).map_err(err)?;
            let whisker = |a: f64, b: f64| PathElement::new(vec![(x, a), (x, b)], c.stroke_width(1));
            chart.draw_series([whisker(s.min, s.q1), whisker(s.q3, s.max)]).map_err(err)?;
            let cap = |y: f64| PathElement::new(vec![(x - 0.08, y), (x + 0.08, y)], c.stroke_width(1));
            chart.draw_series([cap(s.min), cap(s.max)]).map_err(err)?;
            chart.draw_series(std::iter::once(PathElement::new(vec![(x - 0.18, s.median), (x + 0.18, s.median)], c.stroke_width(3)))).map_err(err)?;
            let above = TextStyle::from((FONT, 12)).pos(Pos::new(HPos::Center, VPos::Bottom));
            chart.draw_series(std::iter::once(Text::new(note.clone(), (x, s.max + (y1 - y0) * 0.015), above))).map_err(err)?;
        }
        let labels: Vec<String> = cats.iter().map(|c| c.0.clone()).collect();
        category_labels(root, &chart, &labels, y0)
    })
}

/// A convex polygon clipped to the square [lo, hi] x [lo, hi]
/// (Sutherland and Hodgman): plotters moves points outside the chart onto
/// its edge, which would bend the shape.
fn clip(poly: &[(f64, f64)], lo: f64, hi: f64) -> Vec<(f64, f64)> {
    // Each edge of the square as (inside?, the crossing of a segment).
    type Inside = fn(&(f64, f64), f64) -> bool;
    let edges: [(Inside, usize, f64); 4] = [(|p, v| p.0 >= v, 0, lo), (|p, v| p.0 <= v, 0, hi), (|p, v| p.1 >= v, 1, lo), (|p, v| p.1 <= v, 1, hi)];
    let mut out = poly.to_vec();
    for (inside, axis, v) in edges {
        let input = std::mem::take(&mut out);
        for (i, &p) in input.iter().enumerate() {
            let q = input[(i + 1) % input.len()];
            let cross = || {
                let (pa, qa) = if axis == 0 { (p.0, q.0) } else { (p.1, q.1) };
                let t = (v - pa) / (qa - pa);
                (p.0 + t * (q.0 - p.0), p.1 + t * (q.1 - p.1))
            };
            match (inside(&p, v), inside(&q, v)) {
                (true, true) => out.push(q),
                (true, false) => out.push(cross()),
                (false, true) => {
                    out.push(cross());
                    out.push(q);
                }
                (false, false) => {}
            }
        }
    }
    out
}

/// Predicted against measured speedups, y = x and the band of `BAND`
/// around it, each point with the range its rounds measured.
pub fn predicted_vs_measured(title: &str, v: &Validate) -> Result<Plot, String> {
    let cells: Vec<&doc::Row> = v.rows.iter().filter(|r| r.layout != "4k" && r.measured_speedup.is_some() && r.predicted_speedup.is_some()).collect();
    if cells.is_empty() {
        return Err("no cell has both a measured and a predicted speedup".into());
    }
    let mut lo = f64::INFINITY;
    let mut hi = 0f64;
    for r in &cells {
        let s = r.measured_speedup_spread.as_ref();
        for x in [r.measured_speedup, r.predicted_speedup, s.map(|s| s.min), s.map(|s| s.max)].into_iter().flatten() {
            lo = lo.min(x);
            hi = hi.max(x);
        }
    }
    let pad = ((hi - lo) * 0.08).max(0.02);
    let (a, b) = (lo - pad, hi + pad);
    let mut workloads: Vec<&str> = Vec::new();
    for r in &cells {
        if !workloads.contains(&r.workload.as_str()) {
            workloads.push(&r.workload);
        }
    }
    svg(title, |root, title| {
        let mut chart = builder(root, title, 44, 60).build_cartesian_2d(a..b, a..b).map_err(err)?;
        chart
            .configure_mesh()
            .x_desc("measured speedup over 4 KB pages (x, median of rounds)")
            .y_desc("predicted speedup over 4 KB pages (x)")
            .x_label_formatter(&|x| format!("{x:.2}"))
            .y_label_formatter(&|y| format!("{y:.2}"))
            .label_style((FONT, 12))
            .draw()
            .map_err(err)?;
        let band = RGBColor(0, 114, 178).mix(0.12);
        chart
            .draw_series(std::iter::once(Polygon::new(clip(&[(a, a * (1.0 - BAND)), (b, b * (1.0 - BAND)), (b, b * (1.0 + BAND)), (a, a * (1.0 + BAND))], a, b), band.filled())))
            .map_err(err)?
            .label(format!("within {:.0} % of measured", BAND * 100.0))
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 14, y + 5)], band.filled()));
        chart
            .draw_series(LineSeries::new([(a, a), (b, b)], BLACK.stroke_width(1)))
            .map_err(err)?
            .label("y = x (prediction exact)")
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], BLACK.stroke_width(1)));
        for (k, w) in workloads.iter().enumerate() {
            let c = colour(k);
            let mine: Vec<&&doc::Row> = cells.iter().filter(|r| r.workload == *w).collect();
            chart
                .draw_series(mine.iter().filter_map(|r| r.measured_speedup_spread.as_ref().map(|s| (s, r.predicted_speedup.unwrap_or(0.0)))).map(|(s, y)| PathElement::new(vec![(s.min, y), (s.max, y)], c.mix(0.6).stroke_width(1))))
                .map_err(err)?;
            chart
                .draw_series(mine.iter().map(|r| Circle::new((r.measured_speedup.unwrap_or(0.0), r.predicted_speedup.unwrap_or(0.0)), 4, c.filled())))
                .map_err(err)?
                .label(w.to_string())
                .legend(move |(x, y)| Circle::new((x + 7, y), 4, c.filled()));
        }
        legend(&mut chart, SeriesLabelPosition::UpperLeft)
    })
}

/// The headline figures of a reproduction that have a published and a
/// predicted change: both changes side by side, in per cent, numbered as
/// `Reproduce::headline` numbers them, with the band a prediction must fall
/// in to agree (within half the published change) around each published
/// bar. A bar beyond the plot's range (set by the published changes) is
/// cut at its edge; each bar's change is written at its end.
pub fn published_changes(title: &str, r: &doc::Reproduce) -> Result<Plot, String> {
    let rows: Vec<(f64, f64, bool)> = r.headline().iter().filter_map(|p| Some((p.published_change_percent?, p.predicted_change_percent?, p.agrees == Some(true)))).collect();
    if rows.is_empty() {
        return Err("no headline figure with a published and a predicted change".into());
    }
    let lo = rows.iter().map(|r| r.0 - r.0.abs() / 2.0).fold(0f64, f64::min);
    let hi = rows.iter().map(|r| r.0 + r.0.abs() / 2.0).fold(0f64, f64::max);
    let pad = (hi - lo) * 0.3;
    let (y0, y1) = (if lo < 0.0 { lo - pad } else { 0.0 }, hi + pad);
    let cut = |v: f64| v.clamp(y0, y1);
    svg(title, |root, title| {
        let mut chart = category_chart(root, title, rows.len(), y0..y1, 56, "change with superpages (%)")?;
        let (band, pub_c) = (RGBColor(0, 114, 178).mix(0.12), RGBColor(150, 150, 150));
        chart
            .draw_series(rows.iter().enumerate().map(|(i, r)| Rectangle::new([(i as f64 + 0.06, r.0 - r.0.abs() / 2.0), (i as f64 + 0.94, r.0 + r.0.abs() / 2.0)], band.filled())))
            .map_err(err)?
            .label("agrees: within half the published change")
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 14, y + 5)], band.filled()));
        chart
            .draw_series(rows.iter().enumerate().map(|(i, r)| Rectangle::new([(i as f64 + 0.14, 0.0), (i as f64 + 0.48, r.0)], pub_c.filled())))
            .map_err(err)?
            .label("published")
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 14, y + 5)], pub_c.filled()));
        for (agree, c, label) in [(true, colour(2), "predicted, agrees"), (false, colour(1), "predicted, does not agree")] {
            let mine: Vec<(usize, &(f64, f64, bool))> = rows.iter().enumerate().filter(|(_, r)| r.2 == agree).collect();
            if mine.is_empty() {
                continue;
            }
            chart
                .draw_series(mine.iter().map(|(i, r)| Rectangle::new([(*i as f64 + 0.52, 0.0), (*i as f64 + 0.86, cut(r.1))], c.filled())))
                .map_err(err)?
                .label(label)
                .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 14, y + 5)], c.filled()));
        }
        let at = |v: f64| {
            let pos = if v >= 0.0 { VPos::Bottom } else { VPos::Top };
            TextStyle::from((FONT, 10)).pos(Pos::new(HPos::Center, pos))
        };
        let nudge = (y1 - y0) * 0.01;
        let end = |v: f64| cut(v) + if v >= 0.0 { nudge } else { -nudge };
        let show = |v: f64| if v.abs() < 10.0 { format!("{v:+.1}") } else { format!("{v:+.0}") };
        chart.draw_series(rows.iter().enumerate().map(|(i, r)| Text::new(show(r.0), (i as f64 + 0.31, end(r.0)), at(r.0)))).map_err(err)?;
        chart.draw_series(rows.iter().enumerate().map(|(i, r)| Text::new(show(r.1), (i as f64 + 0.69, end(r.1)), at(r.1)))).map_err(err)?;
        legend(&mut chart, if y0 < 0.0 { SeriesLabelPosition::LowerRight } else { SeriesLabelPosition::UpperLeft })?;
        let labels: Vec<String> = (1..=rows.len()).map(|i| i.to_string()).collect();
        category_labels(root, &chart, &labels, y0)
    })
}

/// The simulator's resident memory over the run, one line per run.
pub fn rss(title: &str, runs: &[(String, &[RssSample])]) -> Result<Plot, String> {
    let pts = || runs.iter().flat_map(|(_, s)| s.iter());
    let xmax = pts().map(|s| s.host_seconds).fold(0f64, f64::max);
    let ymax = pts().map(|s| s.bytes as f64 / (1u64 << 20) as f64).fold(0f64, f64::max);
    if pts().count() < 2 {
        return Err("fewer than two readings of resident memory".into());
    }
    svg(title, |root, title| {
        let mut chart = builder(root, title, 40, 60).build_cartesian_2d(0f64..xmax.max(1e-3) * 1.02, 0f64..ymax.max(1.0) * 1.1).map_err(err)?;
        chart
            .configure_mesh()
            .x_desc("host seconds into the run")
            .y_desc("resident memory of splab (MiB)")
            .label_style((FONT, 12))
            .draw()
            .map_err(err)?;
        for (i, (label, s)) in runs.iter().enumerate() {
            let c = colour(i);
            chart
                .draw_series(LineSeries::new(s.iter().map(|p| (p.host_seconds, p.bytes as f64 / (1u64 << 20) as f64)), c.stroke_width(2)))
                .map_err(err)?
                .label(label.clone())
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], c.stroke_width(2)));
        }
        legend(&mut chart, SeriesLabelPosition::LowerRight)
    })
}

/// Bars of simulated cycles by what they were spent on.
pub fn cycles(title: &str, s: &Sim) -> Result<Plot, String> {
    let c = &s.cycles;
    let parts = [("data accesses", c.data), ("address translation", c.translation), ("kernel work", c.kernel)];
    let ymax = parts.iter().map(|p| p.1).fold(0f64, f64::max);
    if ymax <= 0.0 {
        return Err("no simulated cycles to plot".into());
    }
    let total: f64 = parts.iter().map(|p| p.1).sum();
    svg(title, |root, title| {
        let mut chart = category_chart(root, title, parts.len(), 0f64..ymax * 1.15, 72, "simulated cycles")?;
        chart
            .draw_series(parts.iter().enumerate().map(|(i, p)| Rectangle::new([(i as f64 + 0.2, 0.0), (i as f64 + 0.8, p.1)], colour(i).filled())))
            .map_err(err)?;
        let above = TextStyle::from((FONT, 12)).pos(Pos::new(HPos::Center, VPos::Bottom));
        chart
            .draw_series(parts.iter().enumerate().map(|(i, p)| Text::new(format!("{:.1} %", 100.0 * p.1 / total), (i as f64 + 0.5, p.1 + ymax * 0.01), above.clone())))
            .map_err(err)?;
        let labels: Vec<String> = parts.iter().map(|p| p.0.to_string()).collect();
        category_labels(root, &chart, &labels, 0.0)
    })
}

/// The quantities `compare`'s bars show.
fn pairs(c: &Compare) -> Vec<Pair> {
    let (a, b) = (&c.off, &c.on);
    let f = &a.figure;
    vec![
        Pair { name: crate::output::labelled(&f.name, &f.unit), off: f.value.unwrap_or(f64::NAN), on: b.figure.value.unwrap_or(f64::NAN) },
        Pair { name: "simulated s".into(), off: a.sim_seconds, on: b.sim_seconds },
        Pair { name: "TLB misses".into(), off: a.tlb.total_misses as f64, on: b.tlb.total_misses as f64 },
        Pair { name: "page walks".into(), off: a.hw.walks as f64, on: b.hw.walks as f64 },
        Pair { name: "walk memory refs".into(), off: a.hw.walk_mem_refs as f64, on: b.hw.walk_mem_refs as f64 },
    ]
}

/// The curves of a lat report: colour `colour` plus the stride's place
/// among the strides, or, with `by_stride` false, dashed for every stride
/// after the first.
fn lat_lines(report: &str, label: &str, colour: usize, by_stride: bool, dashed: bool) -> Vec<Line> {
    doc::lat_curves(report)
        .into_iter()
        .enumerate()
        .map(|(i, c)| Line {
            label: format!("stride {}{label}", c.stride),
            colour: colour + if by_stride { i } else { 0 },
            dashed: dashed || (!by_stride && i > 0),
            curve: c,
        })
        .collect()
}

fn native_spreads(title: &str, n: &Native) -> Result<Plot, String> {
    let ran: Vec<&doc::Layout> = n.layouts.iter().filter(|l| !l.figures.is_empty()).collect();
    let Some(first) = ran.first().map(|l| &l.figures[0]) else { return Err("no layout ran".into()) };
    let cats: Vec<(String, Spread, String)> = ran
        .iter()
        .map(|l| {
            let f = &l.figures[0];
            let note = f.speedup_vs_4k.map(|s| format!("{s:.2}x")).unwrap_or_default();
            (l.pages.clone(), f.spread.clone(), note)
        })
        .collect();
    let better = if first.higher_is_better { "higher is better" } else { "lower is better" };
    spreads(title, &format!("{}, {better}", crate::output::labelled(&first.name, &first.unit)), &cats)
}

fn bench_bars(title: &str, b: &Bench) -> Result<Plot, String> {
    let m = 1e6;
    let cats: Vec<(String, Spread, String)> = b
        .parts()
        .iter()
        .map(|(name, median, all)| {
            let rates: Vec<f64> = if all.is_empty() { vec![median.rate() / m] } else { all.iter().map(|p| p.rate() / m).collect() };
            let (lo, hi) = rates.iter().fold((f64::INFINITY, 0f64), |(a, b), &x| (a.min(x), b.max(x)));
            let med = median.rate() / m;
            let s = Spread { median: med, q1: med, q3: med, min: lo.min(med), max: hi.max(med) };
            (name.to_string(), s, format!("{med:.2} M"))
        })
        .collect();
    spreads(title, "simulated references per second (millions)", &cats)
}

/// The one plot of a document (`--plot`): lat curves for a lat run,
/// compare's bars, native's medians with their spread, validate's
/// predicted against measured speedups, bench's rates; a sim run of
/// another workload, its simulated cycles by kind.
pub fn one(d: &Doc) -> Result<Plot, String> {
    let title = d.command();
    match d {
        Doc::Sim(s) => {
            let curves = lat_lines(&s.report, "", 0, true, false);
            if curves.is_empty() {
                cycles(&title, s)
            } else {
                lat(&title, &curves)
            }
        }
        Doc::Compare(c) => {
            // A colour per stride; superpages off dashed.
            let mut curves = lat_lines(&c.off.report, ", superpages off", 0, true, true);
            curves.extend(lat_lines(&c.on.report, ", superpages on", 0, true, false));
            if curves.is_empty() {
                change_bars(&title, &pairs(c))
            } else {
                lat(&title, &curves)
            }
        }
        Doc::Native(n) => native_spreads(&title, n),
        Doc::Validate(v) => predicted_vs_measured(&title, v),
        Doc::Bench(b) => bench_bars(&title, b),
        Doc::Reproduce(r) => published_changes(&title, r),
    }
}

/// Every plot of a document (`splab report`): its one plot, and where
/// there is more to see, the rest: compare's bars beside lat's curves,
/// lat curves of each native layout's median run, and the simulator's
/// resident memory over the run where the run recorded it.
pub fn all(d: &Doc) -> Vec<Result<Plot, String>> {
    let title = d.command();
    let mut v = vec![one(d)];
    match d {
        Doc::Compare(c) => {
            if !doc::lat_curves(&c.off.report).is_empty() {
                v.push(change_bars(&title, &pairs(c)));
            }
            if c.off.host_rss.len() + c.on.host_rss.len() >= 2 {
                v.push(rss(&title, &[("superpages off".into(), &c.off.host_rss), ("superpages on".into(), &c.on.host_rss)]));
            }
        }
        Doc::Sim(s) if s.host_rss.len() >= 2 => v.push(rss(&title, &[(format!("superpages {}", if s.superpages { "on" } else { "off" }), &s.host_rss)])),
        Doc::Native(n) => {
            // A colour per layout; strides after the first dashed.
            let mut curves = Vec::new();
            for (k, l) in n.layouts.iter().enumerate() {
                // The median run by the headline figure, as the text shows.
                let mut runs: Vec<&doc::NativeRun> = l.runs.iter().collect();
                runs.sort_by(|a, b| {
                    let f = |r: &doc::NativeRun| r.outcome.figures.first().and_then(|f| f.value).unwrap_or(0.0);
                    f(a).total_cmp(&f(b))
                });
                if let Some(r) = runs.get(runs.len().saturating_sub(1) / 2) {
                    curves.extend(lat_lines(&r.outcome.report, &format!(", {}", l.pages), k, false, false));
                }
            }
            if !curves.is_empty() {
                v.push(lat(&title, &curves));
            }
        }
        _ => {}
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_read_as_lmbench_writes_them() {
        assert_eq!(mb_label(0.00390625), "4K");
        assert_eq!(mb_label(256.0), "256M");
    }

    #[test]
    fn a_lat_plot_has_its_title_axes_and_a_line_per_curve() {
        let c = |s, dashed| Line { label: format!("stride {s}"), curve: LatCurve { stride: s, points: vec![(0.004, 1.5), (1.0, 5.0), (64.0, 90.0)] }, colour: 0, dashed };
        let p = lat("splab sim lat --json", &[c(64, false), c(4096, true)]).unwrap();
        assert!(p.svg.starts_with("<svg"), "{}", &p.svg[..60]);
        for t in ["splab sim lat --json", "ns per load", "array size (log scale)", "stride 4096"] {
            assert!(p.svg.contains(t), "{t} missing");
        }
        assert!(p.svg.matches("<polyline").count() >= 2, "{}", p.svg);
    }

    #[test]
    fn the_band_is_clipped_to_the_square() {
        let band = clip(&[(1.0, 0.9), (2.0, 1.8), (2.0, 2.2), (1.0, 1.1)], 1.0, 2.0);
        assert!(band.iter().all(|&(x, y)| (1.0..=2.0).contains(&x) && (1.0..=2.0).contains(&y)), "{band:?}");
        // The upper line leaves through the top at x = 2 / 1.1.
        assert!(band.iter().any(|&(x, y)| (x - 2.0 / 1.1).abs() < 1e-9 && y == 2.0), "{band:?}");
    }

    #[test]
    fn bars_write_the_change_over_each_pair() {
        let p = change_bars("t", &[Pair { name: "GUP/s".into(), off: 1.0, on: 1.5 }, Pair { name: "TLB misses".into(), off: 100.0, on: 1.0 }]).unwrap();
        assert!(p.svg.contains("+50.0%") && p.svg.contains("-99.0%") && p.svg.contains("GUP/s"));
        assert!(change_bars("t", &[Pair { name: "x".into(), off: 0.0, on: 1.0 }]).is_err());
    }
}
