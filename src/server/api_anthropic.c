// Anthropic Messages API (/v1/messages): not implemented yet. The follow-up maps system + content blocks (text,
// tool_use, tool_result) onto the normalized messages of api_openai.c, reuses st_parse_sampling and the engine job,
// and writes the event sequence message_start, content_block_start/delta/stop, message_delta, message_stop, ping.
#include "server/srv.h"

enum MHD_Result st_api_messages(st_req *r) {
    json_t *err = json_pack("{s:s, s:{s:s, s:s}}", "type", "error", "error", "type", "not_implemented_error", "message",
                            "POST /v1/messages (the Anthropic Messages API) is not implemented yet in strata serve; "
                            "use the OpenAI-compatible POST /v1/chat/completions");
    return st_reply_json(r, 501, err);
}
