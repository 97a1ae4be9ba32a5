//! The provider-neutral conversation: what a session stores and what every
//! provider request is built from.
//!
//! These types are persisted in sled through bincode, which is not
//! self-describing, so they use only serde's default (externally tagged)
//! enums and no `flatten`, `untagged` or `skip_serializing_if`; free-form
//! JSON (tool arguments, schemas) is kept as a `String`, never as a
//! `serde_json::Value`.

use serde::{Deserialize, Serialize};

/// Who said a message. The system prompt is not a message: it travels in
/// [`ChatRequest::system`], because the providers place it differently.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Role {
    User,
    Assistant,
}

/// One message of the transcript: a role and its ordered content blocks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message {
    pub role: Role,
    pub content: Vec<Block>,
}

impl Message {
    /// A user message holding one text block.
    pub fn user_text(text: impl Into<String>) -> Message {
        Message {
            role: Role::User,
            content: vec![Block::Text { text: text.into() }],
        }
    }

    /// An assistant message holding one text block.
    pub fn assistant_text(text: impl Into<String>) -> Message {
        Message {
            role: Role::Assistant,
            content: vec![Block::Text { text: text.into() }],
        }
    }
}

/// A piece of message content.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Block {
    Text {
        text: String,
    },
    /// Reasoning the model showed before answering. Anthropic signs its
    /// thinking blocks and must get them back, signature included, with the
    /// tool results of the same turn; an unsigned block (from an
    /// OpenAI-compatible server) is never sent to Anthropic.
    Thinking {
        text: String,
        signature: Option<String>,
    },
    /// A tool call made by the assistant. `arguments_json` is the arguments
    /// object exactly as the model produced it (it may be invalid JSON when
    /// the output was cut off).
    ToolUse {
        id: String,
        name: String,
        arguments_json: String,
    },
    /// The result of the tool call `call_id`, carried in a user message.
    ToolResult {
        call_id: String,
        content: String,
        is_error: bool,
    },
    /// Anthropic thinking its safety systems encrypted: opaque `data` that
    /// must go back unchanged, like a signed thinking block. Last among
    /// the variants so records written before it still decode.
    RedactedThinking {
        data: String,
    },
}

/// A tool the model may call. `input_schema_json` is a JSON Schema object.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    pub input_schema_json: String,
}

/// Everything one model call needs, independent of the provider.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatRequest {
    pub system: String,
    pub messages: Vec<Message>,
    pub tools: Vec<ToolSpec>,
    /// Output budget of this call. It is capped at the profile's
    /// `max_output`; 0 means "the profile's `max_output`".
    pub max_tokens: u32,
}
