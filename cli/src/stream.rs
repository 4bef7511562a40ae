//! `accord publish`, `accord subscribe` and `accord stream`: durable streams from a shell.

use std::io::BufRead;
use std::time::Duration;

use accord::{Client, StreamEvent, StreamInfo, StreamRetention, StreamStart, SubscribeOptions};

use crate::{exit, output, signals, Failure, Outcome};

/// Where `accord subscribe` starts: `earliest`, `latest`, or a seq to read after.
pub fn parse_start(s: &str) -> Result<StreamStart, String> {
    StreamStart::parse("--from", s).map_err(|e| crate::output::said(&e))
}

/// One payload from the arguments, or one per stdin line, published in batches of 1,000 (one
/// statement each); prints each event's seq on a line of its own. A reader of the seqs that
/// went away (a closed pipe) stops the seqs, not the publishing: every line read is published.
pub async fn publish(client: &Client, stream: &str, payload: Option<String>) -> Outcome {
    let mut out = output::stdout();
    if let Some(payload) = payload {
        let seq = client.publish(stream, &payload).await?;
        output::print(&mut out, &format!("{seq}\n"))?;
        return Ok(exit::OK);
    }
    let mut reader_gone = false;
    let stdin = std::io::stdin();
    let mut lines = stdin.lock().lines();
    let mut batch = Vec::new();
    let mut published = 0u64;
    loop {
        let line = lines.next().transpose().map_err(|e| {
            Failure::new(exit::ERROR, format!("cannot read payloads from stdin: {e}"))
        })?;
        let end = line.is_none();
        if let Some(line) = line {
            batch.push(line.strip_suffix('\r').map(str::to_string).unwrap_or(line));
        }
        if batch.len() == 1000 || (end && !batch.is_empty()) {
            let seqs = client
                .publish_many(stream, std::mem::take(&mut batch))
                .await?;
            published += seqs.len() as u64;
            if !reader_gone {
                let text: String = seqs.iter().map(|seq| format!("{seq}\n")).collect();
                match output::print(&mut out, &text) {
                    Ok(()) => {}
                    Err(f) if f.is_reader_gone() => reader_gone = true,
                    Err(f) => return Err(f),
                }
            }
        }
        if end {
            break;
        }
    }
    note!(
        "accord: published {published} event{} to {stream:?}",
        if published == 1 { "" } else { "s" }
    );
    Ok(exit::OK)
}

fn event_json(e: &StreamEvent) -> String {
    output::json(&serde_json::json!({
        "stream": e.stream,
        "seq": e.seq,
        "payload": e.payload,
        "published_at": e.published_at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
    }))
}

pub struct SubscribeArgs {
    pub stream: String,
    pub start: Option<StreamStart>,
    pub consumer: Option<String>,
    pub count: Option<u64>,
}

/// Prints the stream's events as JSON lines until Ctrl-C (or `--count` events). A named
/// consumer's position is stored after each line is written, so a restarted `accord subscribe`
/// of the consumer goes on after the last line it printed (a line may repeat after a crash
/// between printing and storing, never be skipped).
pub async fn subscribe(client: &Client, args: SubscribeArgs) -> Outcome {
    let (mut int, mut term) = signals()?;
    let mut options = SubscribeOptions::new();
    if let Some(start) = args.start {
        options = options.start(start);
    }
    if let Some(consumer) = &args.consumer {
        options = options.consumer(consumer.clone());
    }
    let sub = client.subscribe(&args.stream, options).await?;
    note!(
        "accord: reading {:?} after seq {}",
        args.stream,
        sub.position()
    );
    let mut out = output::stdout();
    let mut delivered = 0u64;
    while args.count.is_none_or(|n| delivered < n) {
        let event = tokio::select! {
            event = sub.next() => match event? {
                Some(event) => event,
                None => return Err(Failure::new(exit::ERROR, "the subscription ended")),
            },
            _ = int.recv() => break,
            _ = term.recv() => break,
        };
        match output::print(&mut out, &format!("{}\n", event_json(&event))) {
            Ok(()) => {}
            // The reader went away (a closed pipe): this event was not delivered (nor acked),
            // and accord ends quietly with 0.
            Err(f) if f.is_reader_gone() => break,
            Err(f) => {
                sub.close().await;
                return Err(f);
            }
        }
        delivered += 1;
        if args.consumer.is_some() {
            sub.ack(event.seq).await?;
        }
    }
    sub.close().await;
    Ok(exit::OK)
}

fn info_json(info: &StreamInfo) -> String {
    output::json(&serde_json::json!({
        "stream": info.stream,
        "first_seq": info.first_seq,
        "last_seq": info.last_seq,
        "stored": (info.last_seq - info.first_seq + 1).max(0),
        "max_len": info.retention.max_len,
        "max_age_ms": info.retention.max_age.map(|d| d.as_millis() as u64),
    }))
}

pub struct StreamArgs {
    pub stream: String,
    pub max_len: Option<u64>,
    pub max_age: Option<Duration>,
    pub keep_all: bool,
}

/// Prints the stream's bounds and retention as JSON; with a rule given, sets it first (which
/// trims at once).
pub async fn stream(client: &Client, args: StreamArgs) -> Outcome {
    if args.keep_all || args.max_len.is_some() || args.max_age.is_some() {
        let retention = StreamRetention {
            max_len: args.max_len,
            max_age: args.max_age,
        };
        let trimmed = client.set_stream_retention(&args.stream, retention).await?;
        note!(
            "accord: retention of {:?} set; {trimmed} events trimmed",
            args.stream
        );
    }
    let info = client.stream_info(&args.stream).await?;
    output::print(&mut output::stdout(), &format!("{}\n", info_json(&info)))?;
    Ok(exit::OK)
}
