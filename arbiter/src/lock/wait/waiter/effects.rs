//! What a transition changes in the key's queue before the driver does the next thing.

/// A change to the key's queue, made before the next thing is done.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Effect {
    /// Stand a fresh offer (the last one was taken and answered, or lost).
    Stand,
    /// The key was seen held at this revision: the queue remembers it for the next head.
    SawHeld(i64),
    /// The key was seen released: the next look is a transaction.
    SawReleased,
}

/// At most one offer stood and one observation shared per transition.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Effects {
    pub stand: bool,
    pub seen: Option<Seen>,
}

/// What the queue is told about the key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seen {
    Held(i64),
    Released,
}

impl Effects {
    pub(super) const NONE: Effects = Effects {
        stand: false,
        seen: None,
    };

    pub(super) fn held(revision: i64) -> Self {
        Self {
            stand: false,
            seen: Some(Seen::Held(revision)),
        }
    }

    pub(super) fn released() -> Self {
        Self {
            stand: false,
            seen: Some(Seen::Released),
        }
    }

    pub(super) fn restand() -> Self {
        Self {
            stand: true,
            seen: Some(Seen::Released),
        }
    }

    /// In the order they apply.
    pub fn list(self) -> impl Iterator<Item = Effect> {
        let stand = self.stand.then_some(Effect::Stand);
        let seen = self.seen.map(|s| match s {
            Seen::Held(r) => Effect::SawHeld(r),
            Seen::Released => Effect::SawReleased,
        });
        stand.into_iter().chain(seen)
    }
}
