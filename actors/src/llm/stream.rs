//! One attempt's response body, from bytes to stream events: SSE framing
//! (eventsource-stream, which buffers bytes split anywhere, mid-line and
//! mid-UTF-8 included), the idle guard on every event, and the decoder of
//! the profile's dialect. Retries live a level up, in `client`.

use super::anthropic;
use super::config::Api;
use super::error::{Ctx, LlmError};
use super::event::{Assembled, StreamEvent};
use super::openai;
use eventsource_stream::{EventStreamError, Eventsource};
use futures_util::{Stream, StreamExt};
use std::pin::Pin;
use std::time::Duration;

/// What one SSE event did to the response.
pub(crate) enum Progress {
    More,
    /// The provider's end marker (`[DONE]`, `message_stop`) arrived.
    Complete,
}

pub(crate) enum Decoder {
    OpenAi(openai::Decoder),
    Anthropic(anthropic::Decoder),
}

impl Decoder {
    pub(crate) fn new(api: Api) -> Decoder {
        match api {
            Api::Openai => Decoder::OpenAi(openai::Decoder::default()),
            Api::Anthropic => Decoder::Anthropic(anthropic::Decoder::default()),
        }
    }

    fn feed(
        &mut self,
        ctx: Ctx<'_>,
        event: &str,
        data: &str,
        out: &mut Vec<StreamEvent>,
    ) -> Result<Progress, LlmError> {
        match self {
            Decoder::OpenAi(d) => d.feed(ctx, event, data, out),
            Decoder::Anthropic(d) => d.feed(ctx, event, data, out),
        }
    }

    fn at_eof(&self, ctx: Ctx<'_>) -> Result<(), LlmError> {
        match self {
            Decoder::OpenAi(d) => d.at_eof(ctx),
            Decoder::Anthropic(d) => d.at_eof(ctx),
        }
    }

    fn finish(self) -> Assembled {
        match self {
            Decoder::OpenAi(d) => d.finish(),
            Decoder::Anthropic(d) => d.finish(),
        }
    }
}

type SseEvents = Pin<
    Box<dyn Stream<Item = Result<eventsource_stream::Event, EventStreamError<LlmError>>> + Send>,
>;

/// A response body being decoded. Dropping it drops the body, which closes
/// the connection: that is how a run is cancelled.
pub(crate) struct BodyStream {
    events: SseEvents,
    decoder: Option<Decoder>,
    idle: Duration,
    profile: String,
    key: Option<String>,
}

impl BodyStream {
    /// `bytes` must already map transport failures to classified errors.
    pub(crate) fn new<S, B>(
        bytes: S,
        api: Api,
        idle: Duration,
        profile: String,
        key: Option<String>,
    ) -> BodyStream
    where
        S: Stream<Item = Result<B, LlmError>> + Send + 'static,
        B: AsRef<[u8]>,
    {
        BodyStream {
            events: Box::pin(bytes.eventsource()),
            decoder: Some(Decoder::new(api)),
            idle,
            profile,
            key,
        }
    }

    /// Reads until at least one event is in `out` or the response is whole.
    /// `Ok(Some(_))` is the end of the response; the stream must not be read
    /// after that or after an error.
    pub(crate) async fn step(
        &mut self,
        out: &mut Vec<StreamEvent>,
    ) -> Result<Option<Assembled>, LlmError> {
        loop {
            let next = tokio::time::timeout(self.idle, self.events.next()).await;
            let ctx = Ctx {
                profile: &self.profile,
                key: self.key.as_deref(),
            };
            let Some(decoder) = self.decoder.as_mut() else {
                return Err(LlmError::MalformedStream {
                    detail: ctx.detail(None, "read past the end of the response"),
                });
            };
            match next {
                Err(_) => {
                    return Err(LlmError::Timeout {
                        detail: ctx.detail(
                            None,
                            &format!(
                                "no data from the provider for {:?} (stream_idle_timeout)",
                                self.idle
                            ),
                        ),
                    });
                }
                Ok(None) => {
                    decoder.at_eof(ctx)?;
                    return Ok(self.decoder.take().map(Decoder::finish));
                }
                Ok(Some(Err(EventStreamError::Transport(e)))) => {
                    // Cut after the stop reason: only the end marker (and
                    // perhaps usage) is missing, and the answer is whole.
                    // Accepting it beats paying for a full regeneration.
                    if decoder.at_eof(ctx).is_ok() {
                        tracing::debug!(error = %e, "stream cut after its stop reason; keeping it");
                        return Ok(self.decoder.take().map(Decoder::finish));
                    }
                    return Err(e);
                }
                Ok(Some(Err(e))) => return Err(sse_error(ctx, e)),
                Ok(Some(Ok(ev))) => match decoder.feed(ctx, &ev.event, &ev.data, out)? {
                    Progress::Complete => return Ok(self.decoder.take().map(Decoder::finish)),
                    Progress::More if !out.is_empty() => return Ok(None),
                    Progress::More => {}
                },
            }
        }
    }
}

fn sse_error(ctx: Ctx<'_>, e: EventStreamError<LlmError>) -> LlmError {
    match e {
        EventStreamError::Transport(e) => e,
        EventStreamError::Utf8(e) => LlmError::MalformedStream {
            detail: ctx.detail(None, &format!("the stream is not UTF-8: {e}")),
        },
        EventStreamError::Parser(e) => LlmError::MalformedStream {
            detail: ctx.detail(None, &format!("the stream is not SSE: {e:?}")),
        },
    }
}
