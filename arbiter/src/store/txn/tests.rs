//! The builder without etcd: each handle answers from its own response, whatever was
//! added around it, and the byte budget covers the request the batch sends.

use super::*;
use crate::store::batch::{MAX_BYTES, MAX_MEMBERS};
use etcd_client::CompareOp;
use etcd_client::proto::{
    PbRangeResponse, PbResponseHeader, PbResponseOp, PbTxnOpRequest, PbTxnOpResponse, PbTxnResponse,
};

/// What a fake etcd answers for `b` when its compares `hold`: every read of the branch
/// that runs finds the key it named (value = key), a prefix read finds two keys under it,
/// and a count counts 7.
fn answer(b: &TxnBuilder, hold: bool) -> TxnAnswer {
    let request = PbTxnRequest::from(b.clone().into_parts().0);
    let branch = if hold {
        request.success
    } else {
        request.failure
    };
    let responses = branch
        .into_iter()
        .map(|op| {
            let response = match op.request {
                Some(PbTxnOpRequest::RequestRange(r)) if r.count_only => {
                    PbTxnOpResponse::ResponseRange(PbRangeResponse {
                        count: 7,
                        ..PbRangeResponse::default()
                    })
                }
                Some(PbTxnOpRequest::RequestRange(r)) => {
                    let keys = if r.range_end.is_empty() {
                        vec![r.key.clone()]
                    } else {
                        vec![[&r.key[..], b"a"].concat(), [&r.key[..], b"b"].concat()]
                    };
                    let kvs = keys
                        .into_iter()
                        .map(|k| etcd_client::proto::PbKeyValue {
                            value: k.clone(),
                            key: k,
                            ..Default::default()
                        })
                        .collect();
                    PbTxnOpResponse::ResponseRange(PbRangeResponse {
                        count: 2,
                        kvs,
                        ..PbRangeResponse::default()
                    })
                }
                _ => PbTxnOpResponse::ResponsePut(Default::default()),
            };
            PbResponseOp {
                response: Some(response),
            }
        })
        .collect();
    let resp = TxnResponse(PbTxnResponse {
        header: Some(PbResponseHeader {
            revision: 42,
            ..Default::default()
        }),
        succeeded: hold,
        responses,
    });
    TxnAnswer::from(&resp)
}

fn key(kv: Option<&KeyValue>) -> Option<&[u8]> {
    kv.map(KeyValue::key)
}

/// A grant-shaped transaction, with reads on both sides of a conditional one.
fn grant_shaped(fenced: bool, delayed: bool) -> (TxnBuilder, [Option<KeyRead>; 5]) {
    let mut b = TxnBuilder::new();
    b.when(
        "epoch",
        Compare::mod_revision("/sys/epoch", CompareOp::Equal, 5),
    )
    .when(
        "holder-absent",
        Compare::create_revision("/l/k", CompareOp::Equal, 0),
    )
    .when_some(
        "fence",
        fenced.then(|| Compare::mod_revision("/sys/shard-fence", CompareOp::Equal, 9)),
    );
    b.put("/l/k", b"holder".to_vec(), Some(0x7a));
    if delayed {
        b.put("/d/k", b"marker".to_vec(), None);
    }
    let holder = b.read("/l/k");
    let epoch = b.read("/sys/epoch");
    let fence = fenced.then(|| b.read("/sys/shard-fence"));
    let delay = delayed.then(|| b.read("/d/k"));
    let session = b.read("/s/7a");
    (b, [Some(holder), Some(epoch), fence, delay, Some(session)])
}

#[test]
fn each_read_answers_from_its_own_response() {
    let want: [Option<&[u8]>; 5] = [
        Some(b"/l/k"),
        Some(b"/sys/epoch"),
        Some(b"/sys/shard-fence"),
        Some(b"/d/k"),
        Some(b"/s/7a"),
    ];
    for fenced in [false, true] {
        for delayed in [false, true] {
            let (b, reads) = grant_shaped(fenced, delayed);
            let refused = answer(&b, false);
            for (read, want) in reads.iter().zip(want) {
                if let Some(r) = read {
                    assert_eq!(key(refused.kv(*r)), want, "{fenced} {delayed}");
                }
            }
            // The failure branch did not run: its reads found nothing.
            let committed = answer(&b, true);
            assert!(committed.succeeded());
            assert_eq!(committed.revision(), Some(42));
            for r in reads.iter().flatten() {
                assert!(committed.kv(*r).is_none());
            }
        }
    }
}

#[test]
fn then_reads_ranges_and_counts() {
    let mut b = TxnBuilder::new();
    b.when(
        "fence-absent",
        Compare::create_revision("/x/1", CompareOp::Equal, 0),
    );
    b.put("/x/1", "", Some(1));
    let after_put = b.then_read("/l/k");
    let queued = b.then_count("/q/k//");
    let permits = b.read_prefix("/p/k//");
    let first_writer = b.read_first("/r/k//w/");
    let fence = b.read("/x/1");

    let committed = answer(&b, true);
    assert_eq!(key(committed.kv(after_put)), Some(&b"/l/k"[..]));
    assert_eq!(committed.count(queued), Some(7));
    assert!(committed.kvs(permits).is_empty());
    assert!(committed.kv(fence).is_none());

    let refused = answer(&b, false);
    assert!(refused.kv(after_put).is_none());
    assert_eq!(refused.count(queued), None);
    let keys: Vec<&[u8]> = refused.kvs(permits).iter().map(KeyValue::key).collect();
    assert_eq!(keys, [&b"/p/k//a"[..], &b"/p/k//b"[..]]);
    assert_eq!(key(refused.kv(first_writer)), Some(&b"/r/k//w/a"[..]));
    assert_eq!(key(refused.kv(fence)), Some(&b"/x/1"[..]));
}

#[test]
fn a_response_of_another_shape_reads_as_nothing() {
    let mut b = TxnBuilder::new();
    let read = b.then_read("/l/k");
    // A put's response where the read should be (a malformed or crossed answer).
    let resp = TxnResponse(PbTxnResponse {
        header: None,
        succeeded: true,
        responses: vec![PbResponseOp {
            response: Some(PbTxnOpResponse::ResponsePut(Default::default())),
        }],
    });
    let a = TxnAnswer::from(&resp);
    assert!(a.kv(read).is_none());
    assert_eq!(a.revision(), None);
    let none = TxnAnswer::new(None, true, Vec::new());
    assert!(none.kv(read).is_none());
}

#[test]
fn the_request_keeps_the_order_things_were_added_in() {
    let (b, _) = grant_shaped(true, true);
    assert_eq!(b.compare_names(), ["epoch", "holder-absent", "fence"]);
    assert_eq!(b.writes(), ["/l/k", "/d/k"]);
    let request = PbTxnRequest::from(b.into_parts().0);
    let keys = |ops: &[etcd_client::proto::PbTxnRequestOp]| -> Vec<Vec<u8>> {
        ops.iter()
            .filter_map(|op| match &op.request {
                Some(PbTxnOpRequest::RequestRange(r)) => Some(r.key.clone()),
                Some(PbTxnOpRequest::RequestPut(r)) => Some(r.key.clone()),
                Some(PbTxnOpRequest::RequestDeleteRange(r)) => Some(r.key.clone()),
                _ => None,
            })
            .collect()
    };
    let compared: Vec<&[u8]> = request.compare.iter().map(|c| &c.key[..]).collect();
    assert_eq!(compared, [&b"/sys/epoch"[..], b"/l/k", b"/sys/shard-fence"]);
    assert_eq!(keys(&request.success), [b"/l/k".to_vec(), b"/d/k".to_vec()]);
    assert_eq!(
        keys(&request.failure),
        ["/l/k", "/sys/epoch", "/sys/shard-fence", "/d/k", "/s/7a"].map(|k| k.as_bytes().to_vec())
    );
    // A put on no lease is sent as etcd's default put; a leased one carries its lease.
    match &request.success[..] {
        [leased, plain] => {
            assert!(
                matches!(&leased.request, Some(PbTxnOpRequest::RequestPut(p)) if p.lease == 0x7a)
            );
            assert!(matches!(&plain.request, Some(PbTxnOpRequest::RequestPut(p)) if p.lease == 0));
        }
        other => panic!("two puts, got {}", other.len()),
    }
}

#[test]
fn claims_and_deletes_are_writes() {
    let mut b = TxnBuilder::new();
    b.put("/p/k//0", "r", Some(3));
    b.claim("/p/k//".to_owned());
    b.delete("/q/k//3");
    b.then_read("/l/k");
    assert_eq!(b.writes(), ["/p/k//0", "/p/k//", "/q/k//3"]);
}

/// The encoded length of the batch `members` make (`batch.rs`: each a sub-transaction of
/// the outer one's success branch).
fn batch_len(members: &[TxnBuilder]) -> usize {
    let outer = Txn::new().and_then(
        members
            .iter()
            .map(|m| TxnOp::txn(m.clone().into_parts().0))
            .collect::<Vec<_>>(),
    );
    prost::Message::encoded_len(&PbTxnRequest::from(outer))
}

#[test]
fn the_budget_covers_the_encoded_request() {
    let long = "k".repeat(300);
    let big = vec![b'v'; 20_000];
    let mut members = vec![grant_shaped(false, false).0, grant_shaped(true, true).0];
    let mut wide = TxnBuilder::new();
    wide.when(
        "lease",
        Compare::lease(long.as_str(), CompareOp::NotEqual, i64::MAX).with_prefix(),
    )
    .when(
        "mod",
        Compare::mod_revision(long.as_str(), CompareOp::Equal, i64::MIN),
    );
    wide.put(&long, big, Some(i64::MAX));
    wide.delete(&long);
    wide.read_prefix(&long);
    wide.read_first(&long);
    wide.then_count(&long);
    members.push(wide);
    for m in &members {
        assert!(m.bytes() >= batch_len(std::slice::from_ref(m)), "{m:?}");
    }
    let budget: usize = members.iter().map(TxnBuilder::bytes).sum();
    assert!(budget >= batch_len(&members));
    // The framing is small beside the member itself: the budget is its size, not a guess.
    let member = &members[0];
    assert!(member.bytes() <= batch_len(std::slice::from_ref(member)) + MEMBER_FRAMING);
}

#[test]
fn a_full_batch_of_grants_stays_under_the_byte_bound() {
    // A grant with a long key, a lock-delay, a queue place, a shard fence and an attempt
    // fence: MAX_MEMBERS of them still fit, so members, not bytes, bound a batch of grants
    // (as they did when the budget was guessed).
    let hkey = format!("/l/{}", "k".repeat(200));
    let mut b = TxnBuilder::new();
    b.when(
        "epoch",
        Compare::mod_revision("/sys/epoch", CompareOp::Equal, 1 << 40),
    )
    .when(
        "holder-absent",
        Compare::create_revision(hkey.as_str(), CompareOp::Equal, 0),
    )
    .when(
        "session",
        Compare::create_revision("/s/0123456789abcdef", CompareOp::Equal, 1 << 40),
    )
    .when(
        "fence",
        Compare::mod_revision("/sys/shard-fence", CompareOp::Equal, 1 << 40),
    )
    .when(
        "attempt-fence",
        Compare::create_revision("/x/0123456789abcdef/0123456789abcdef", CompareOp::Equal, 0),
    )
    .when(
        "delay-absent",
        Compare::create_revision(hkey.replace("/l/", "/d/").as_str(), CompareOp::Equal, 0),
    )
    .when(
        "queue-place",
        Compare::create_revision(
            format!("{}//0123456789abcdef", hkey.replace("/l/", "/q/")).as_str(),
            CompareOp::Equal,
            1 << 40,
        ),
    );
    b.put(&hkey, vec![b'h'; 400], Some(i64::MAX));
    b.put(&hkey.replace("/l/", "/d/"), vec![b'm'; 100], None);
    b.delete(&format!("{}//0123456789abcdef", hkey.replace("/l/", "/q/")));
    for k in [
        hkey.as_str(),
        "/sys/epoch",
        "/s/0123456789abcdef",
        "/sys/shard-fence",
    ] {
        b.read(k);
    }
    b.read(&hkey.replace("/l/", "/d/"));
    assert!(b.bytes() * MAX_MEMBERS <= MAX_BYTES, "{}", b.bytes());
}
