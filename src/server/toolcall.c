// Tool-call parsing (see toolcall.h). Placeholder until the follow-up implements the per-template formats and the
// streaming variant (tool_calls deltas).
#include "server/toolcall.h"

#include <stdlib.h>
#include <string.h>

json_t *st_toolcall_parse(const char *template_src, const char *text, char **content) {
    (void)template_src;
    *content = strdup(text ? text : "");
    return json_array();
}
