//! `lockctl top`'s terminal view: the store read every `--every` seconds and on each key
//! that needs it, drawn with ratatui. Keys come from a thread blocked on the terminal (a
//! read of the store never delays a key, and a key never waits for a read to finish
//! drawing). The terminal is restored on every way out, an error included.

use super::screen::{Effect, Key, Screen};
use super::{Sort, human};
use crate::Failure;
use lock_explorer::{Flag, Mode, Row};
use lock_store::Etcd;
use ratatui::crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Cell, Paragraph, Row as TableRow, Table, TableState, Wrap};
use ratatui::{DefaultTerminal, Frame};
use std::time::Duration;
use tokio::sync::mpsc;

/// What the last read left to say: when it was, or why it failed (the last good rows stay
/// on screen, marked stale, so a flapping store does not blank the view).
struct Status {
    read_at_ms: Option<u64>,
    error: Option<String>,
    every: Duration,
}

pub async fn run(
    etcd: Etcd,
    mut screen: Screen,
    reader: super::Reader,
    every: Duration,
) -> Result<(), Failure> {
    let mut terminal = ratatui::try_init()
        .map_err(|e| Failure::input(format!("lockctl top: the terminal: {e}")))?;
    let out = run_in(&mut terminal, &etcd, &mut screen, &reader, every).await;
    ratatui::restore();
    out
}

async fn run_in(
    terminal: &mut DefaultTerminal,
    etcd: &Etcd,
    screen: &mut Screen,
    reader: &super::Reader,
    every: Duration,
) -> Result<(), Failure> {
    let (tx, mut keys) = mpsc::channel(16);
    std::thread::spawn(move || read_keys(&tx));
    let mut status = Status {
        read_at_ms: None,
        error: None,
        every,
    };
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let effect = tokio::select! {
            _ = tick.tick() => Effect::Read,
            key = keys.recv() => match key {
                Some(k) => screen.on_key(k),
                // The terminal's input ended.
                None => Effect::Quit,
            },
        };
        match effect {
            Effect::Quit => return Ok(()),
            Effect::Read => {
                match reader.read(etcd, screen).await {
                    Ok(()) => {
                        status.read_at_ms = Some(super::now_ms());
                        status.error = None;
                    }
                    Err(e) => status.error = Some(e.message),
                }
                tick.reset();
            }
            Effect::Draw => {}
        }
        terminal
            .draw(|f| draw(f, screen, &status))
            .map_err(|e| Failure::input(format!("lockctl top: drawing: {e}")))?;
    }
}

/// Blocks on the terminal and forwards the keys the view knows; ends when the receiver
/// is gone or the terminal fails.
fn read_keys(tx: &mpsc::Sender<Key>) {
    loop {
        let Ok(ev) = event::read() else { return };
        let Event::Key(k) = ev else { continue };
        if k.kind != KeyEventKind::Press {
            continue;
        }
        let key = match k.code {
            KeyCode::Char('c') if k.modifiers.contains(KeyModifiers::CONTROL) => Key::Quit,
            KeyCode::Char('q') | KeyCode::Esc => Key::Quit,
            KeyCode::Up | KeyCode::Char('k') => Key::Up,
            KeyCode::Down | KeyCode::Char('j') => Key::Down,
            KeyCode::Enter | KeyCode::Right | KeyCode::Char('l') => Key::Enter,
            KeyCode::Backspace | KeyCode::Left | KeyCode::Char('h') => Key::Back,
            KeyCode::Char('s') => Key::Sort,
            KeyCode::Char('n') | KeyCode::PageDown => Key::NextPage,
            KeyCode::Char('p') | KeyCode::PageUp => Key::PrevPage,
            _ => continue,
        };
        if tx.blocking_send(key).is_err() {
            return;
        }
    }
}

fn sort_word(s: Sort) -> &'static str {
    match s {
        Sort::HeldFor => "held for",
        Sort::Waiters => "waiters",
        Sort::Key => "key",
    }
}

fn draw(f: &mut Frame<'_>, screen: &Screen, status: &Status) {
    let detail_height = if screen.detail { 11 } else { 0 };
    let [head, body, detail, foot] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Min(3),
        Constraint::Length(detail_height),
        Constraint::Length(1),
    ])
    .areas(f.area());
    f.render_widget(Paragraph::new(header(screen, status)), head);
    match &screen.namespace {
        None => namespaces(f, screen, body),
        Some(ns) => holds(f, screen, ns, body),
    }
    if let Some(r) = screen.selected_row().filter(|_| screen.detail) {
        f.render_widget(details(r), detail);
    }
    let help = match screen.namespace {
        None => "↑↓ move  enter open  n/p page  q quit",
        Some(_) if screen.pinned => "↑↓ move  enter details  s sort  n/p page  q quit",
        Some(_) => "↑↓ move  enter details  s sort  n/p page  ← namespaces  q quit",
    };
    f.render_widget(
        Paragraph::new(help).style(Style::new().add_modifier(Modifier::DIM)),
        foot,
    );
}

fn header(screen: &Screen, status: &Status) -> Line<'static> {
    let place = match &screen.namespace {
        None => "namespaces".to_owned(),
        Some(ns) => format!(
            "namespace {ns}  sort: {}  page {}",
            sort_word(screen.sort),
            screen.pages.len() + 1
        ),
    };
    let read = match (&status.error, status.read_at_ms) {
        (Some(e), Some(at)) => Span::styled(
            format!("STALE (read at {}): {e}", clock(at)),
            Style::new().fg(Color::Red).add_modifier(Modifier::BOLD),
        ),
        (Some(e), None) => Span::styled(
            format!("NOT READ: {e}"),
            Style::new().fg(Color::Red).add_modifier(Modifier::BOLD),
        ),
        (None, Some(at)) => Span::raw(format!(
            "read {} UTC, every {}s",
            clock(at),
            status.every.as_secs()
        )),
        (None, None) => Span::raw("reading…"),
    };
    Line::from(vec![
        Span::styled("lockctl top  ", Style::new().add_modifier(Modifier::BOLD)),
        Span::raw(place),
        Span::raw("  "),
        read,
    ])
}

/// `HH:MM:SS` of a wall-clock time (UTC).
fn clock(ms: u64) -> String {
    let s = ms / 1000;
    format!("{:02}:{:02}:{:02}", (s / 3600) % 24, (s / 60) % 60, s % 60)
}

fn table_state(selected: usize, len: usize) -> TableState {
    TableState::default().with_selected((len > 0).then_some(selected))
}

fn namespaces(f: &mut Frame<'_>, screen: &Screen, area: Rect) {
    let rows = screen.namespaces.iter().map(|(ns, held, shared)| {
        TableRow::new(vec![
            Cell::from(ns.clone()),
            Cell::from(held.to_string()),
            Cell::from(shared.to_string()),
        ])
    });
    let title = match &screen.next {
        Some(_) => " namespaces holding keys (more: n) ",
        None => " namespaces holding keys ",
    };
    let table = Table::new(
        rows,
        [
            Constraint::Min(20),
            Constraint::Length(8),
            Constraint::Length(8),
        ],
    )
    .header(TableRow::new(vec!["NAMESPACE", "HELD", "SHARED"]).style(bold()))
    .block(Block::bordered().title(title))
    .row_highlight_style(Style::new().add_modifier(Modifier::REVERSED))
    .highlight_symbol("> ");
    let mut state = table_state(screen.selected, screen.namespaces.len());
    f.render_stateful_widget(table, area, &mut state);
}

fn bold() -> Style {
    Style::new().add_modifier(Modifier::BOLD)
}

/// A row's state by colour and by word: a flag in red, a queue in yellow, a quiet hold
/// in the terminal's own colour.
fn row_style(r: &Row) -> Style {
    if !r.flags.is_empty() {
        Style::new().fg(Color::Red)
    } else if r.durable_waiters > 0 || r.writer_waiting {
        Style::new().fg(Color::Yellow)
    } else {
        Style::new()
    }
}

fn holds(f: &mut Frame<'_>, screen: &Screen, ns: &str, area: Rect) {
    let rows = screen.rows.iter().map(|r| {
        let flags: Vec<&str> = r.flags.iter().map(Flag::word).collect();
        TableRow::new(vec![
            Cell::from(r.key.clone()),
            Cell::from(r.mode.word()),
            Cell::from(short_identity(&r.identity).to_owned()),
            Cell::from(r.instance.clone().unwrap_or_else(|| "-".into())),
            Cell::from(human(r.held_for_ms)),
            Cell::from(r.ttl_left_s.map_or("gone".into(), |s| format!("{s}s"))),
            Cell::from(waiting(r)),
            Cell::from(if flags.is_empty() {
                "-".to_owned()
            } else {
                flags.join(",")
            }),
        ])
        .style(row_style(r))
    });
    let title = format!(
        " {} hold(s) in {ns}{} ",
        screen.rows.len(),
        if screen.next.is_some() {
            " (more: n)"
        } else {
            ""
        }
    );
    let table = Table::new(
        rows,
        [
            Constraint::Min(24),
            Constraint::Length(6),
            Constraint::Min(16),
            Constraint::Length(14),
            Constraint::Length(8),
            Constraint::Length(8),
            Constraint::Length(8),
            Constraint::Length(14),
        ],
    )
    .header(
        TableRow::new(vec![
            "KEY", "MODE", "HOLDER", "INSTANCE", "HELD", "TTL", "WAITING", "FLAGS",
        ])
        .style(bold()),
    )
    .block(Block::bordered().title(title))
    .row_highlight_style(Style::new().add_modifier(Modifier::REVERSED))
    .highlight_symbol("> ");
    let mut state = table_state(screen.selected, screen.rows.len());
    f.render_stateful_widget(table, area, &mut state);
}

/// The last two segments of a SPIFFE ID's path (`sa/payments`): the table's column;
/// the details show it whole.
fn short_identity(id: &str) -> &str {
    let mut cut = id.len();
    for _ in 0..2 {
        match id[..cut].rfind('/') {
            Some(i) => cut = i,
            None => return id,
        }
    }
    &id[cut + 1..]
}

/// Durable waiters, and for a shared key its readers and a writer's mark: `3`, `2r+w`.
fn waiting(r: &Row) -> String {
    match r.mode {
        Mode::Exclusive if r.shared_holders == 0 && !r.writer_waiting => {
            r.durable_waiters.to_string()
        }
        _ => format!(
            "{}r{}",
            r.shared_holders,
            if r.writer_waiting { "+w" } else { "" }
        ),
    }
}

fn details(r: &Row) -> Paragraph<'static> {
    let field = |name: &str, value: String| {
        Line::from(vec![
            Span::styled(format!("{name:>12}  "), bold()),
            Span::raw(value),
        ])
    };
    let flags = if r.flags.is_empty() {
        "none".to_owned()
    } else {
        r.flags
            .iter()
            .map(Flag::explain)
            .collect::<Vec<_>>()
            .join("; ")
    };
    let lines = vec![
        field("key", format!("{} ({})", r.key, r.mode.word())),
        field("holder", r.identity.clone()),
        field(
            "instance",
            r.instance.clone().unwrap_or_else(|| "(not sent)".into()),
        ),
        field("class", r.class.clone()),
        field(
            "acquired",
            format!(
                "{} UTC ({} ago, by the holder's arbiter's clock)",
                clock(r.acquired_at_ms),
                human(r.held_for_ms)
            ),
        ),
        field(
            "session",
            format!(
                "{} (TTL {}, {} left)",
                r.session,
                r.session_ttl_s.map_or("?".into(), |t| format!("{t}s")),
                r.ttl_left_s.map_or("none".into(), |t| format!("{t}s"))
            ),
        ),
        field("waiting", waiting(r)),
        field("flags", flags),
        field(
            "next",
            format!("lockctl inspect {} · lockctl audit {}", r.key, r.key),
        ),
    ];
    Paragraph::new(lines)
        .block(Block::bordered().title(" details (enter or ← to close) "))
        .wrap(Wrap { trim: false })
}

#[cfg(test)]
mod tests {
    #[test]
    fn an_identity_column_keeps_its_last_two_segments() {
        for (id, want) in [
            ("spiffe://dev.lock.local/ns/test/sa/w0", "sa/w0"),
            ("spiffe://x/a", "x/a"),
            ("plain", "plain"),
        ] {
            assert_eq!(super::short_identity(id), want);
        }
    }
}
