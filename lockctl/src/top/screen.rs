//! What `lockctl top`'s terminal view shows and how a key press changes it: pure state,
//! no terminal and no store (the loop in `tui` reads the store and draws). Selection
//! follows a hold, not a line number, so a refresh that reorders rows keeps the operator
//! on the hold they were reading.

use super::Sort;
use lock_explorer::Row;

/// A key press, as the view understands it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Key {
    Up,
    Down,
    /// Open a namespace, or show/hide the selected hold's details.
    Enter,
    /// Close the details, or go back to the namespaces.
    Back,
    /// The next sort order.
    Sort,
    NextPage,
    PrevPage,
    Quit,
}

/// What the loop must do after a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Effect {
    /// Redraw what is there.
    Draw,
    /// Read the store again (another namespace or page), then draw.
    Read,
    Quit,
}

/// A namespace and its counts: exclusive holds, then shared-run entries.
pub type Namespace = (String, u64, u64);

#[derive(Debug, Clone)]
pub struct Screen {
    /// None: the namespaces list.
    pub namespace: Option<String>,
    /// The namespace was given on the command line: Back does not leave it.
    pub pinned: bool,
    pub sort: Sort,
    pub detail: bool,
    /// The page shown starts after this cursor; `pages` are the cursors before it.
    pub after: Option<String>,
    pub pages: Vec<Option<String>>,
    pub namespaces: Vec<Namespace>,
    pub rows: Vec<Row>,
    /// Where the next page starts (None: this is the last).
    pub next: Option<String>,
    pub selected: usize,
}

impl Screen {
    pub fn new(namespace: Option<String>, sort: Sort) -> Self {
        Self {
            pinned: namespace.is_some(),
            namespace,
            sort,
            detail: false,
            after: None,
            pages: Vec::new(),
            namespaces: Vec::new(),
            rows: Vec::new(),
            next: None,
            selected: 0,
        }
    }

    fn len(&self) -> usize {
        match self.namespace {
            Some(_) => self.rows.len(),
            None => self.namespaces.len(),
        }
    }

    /// The selected hold (key and session name it: a shared key has a row per reader).
    pub fn selected_row(&self) -> Option<&Row> {
        self.namespace.as_ref()?;
        self.rows.get(self.selected)
    }

    pub fn on_key(&mut self, key: Key) -> Effect {
        match key {
            Key::Quit => Effect::Quit,
            Key::Up => {
                self.selected = self.selected.saturating_sub(1);
                Effect::Draw
            }
            Key::Down => {
                if self.selected + 1 < self.len() {
                    self.selected += 1;
                }
                Effect::Draw
            }
            Key::Enter => match &self.namespace {
                Some(_) => {
                    self.detail = !self.detail && self.selected_row().is_some();
                    Effect::Draw
                }
                None => match self.namespaces.get(self.selected) {
                    Some((ns, _, _)) => {
                        self.namespace = Some(ns.clone());
                        self.turn_to(None, Vec::new());
                        Effect::Read
                    }
                    None => Effect::Draw,
                },
            },
            Key::Back if self.detail => {
                self.detail = false;
                Effect::Draw
            }
            Key::Back if self.namespace.is_some() && !self.pinned => {
                self.namespace = None;
                self.turn_to(None, Vec::new());
                Effect::Read
            }
            Key::Back => Effect::Draw,
            Key::Sort => {
                self.sort = match self.sort {
                    Sort::HeldFor => Sort::Waiters,
                    Sort::Waiters => Sort::Key,
                    Sort::Key => Sort::HeldFor,
                };
                let rows = self.rows.clone();
                self.show_rows(rows, self.next.clone());
                Effect::Draw
            }
            Key::NextPage => match self.next.clone() {
                Some(next) => {
                    let mut pages = std::mem::take(&mut self.pages);
                    pages.push(self.after.take());
                    self.turn_to(Some(next), pages);
                    Effect::Read
                }
                None => Effect::Draw,
            },
            Key::PrevPage => match self.pages.pop() {
                Some(before) => {
                    let pages = std::mem::take(&mut self.pages);
                    self.turn_to(before, pages);
                    Effect::Read
                }
                None => Effect::Draw,
            },
        }
    }

    fn turn_to(&mut self, after: Option<String>, pages: Vec<Option<String>>) {
        self.after = after;
        self.pages = pages;
        self.selected = 0;
        self.detail = false;
    }

    /// A fresh read of the namespace's page: sorted, the selection kept on its hold (or
    /// the nearest line when that hold is gone), the details closed if nothing is left.
    pub fn show_rows(&mut self, mut rows: Vec<Row>, next: Option<String>) {
        let was = self
            .selected_row()
            .map(|r| (r.key.clone(), r.session.clone()));
        super::sort_rows(&mut rows, self.sort);
        self.rows = rows;
        self.next = next;
        if let Some((key, session)) = was
            && let Some(i) = self
                .rows
                .iter()
                .position(|r| r.key == key && r.session == session)
        {
            self.selected = i;
        }
        self.clamp();
    }

    pub fn show_namespaces(&mut self, names: Vec<Namespace>, next: Option<String>) {
        let was = self.namespaces.get(self.selected).map(|n| n.0.clone());
        self.namespaces = names;
        self.next = next;
        if let Some(i) = was.and_then(|w| self.namespaces.iter().position(|n| n.0 == w)) {
            self.selected = i;
        }
        self.clamp();
    }

    fn clamp(&mut self) {
        self.selected = self.selected.min(self.len().saturating_sub(1));
        if self.selected_row().is_none() {
            self.detail = false;
        }
    }
}

#[cfg(test)]
mod tests;
