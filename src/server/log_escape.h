// EscapeForLog: text a client controls (a request path, an error quoting a field) made safe to
// write into the one-line-per-request log: control bytes, backslashes and bytes >= 0x7f become
// C escapes (\n, \r, \t, \\, \xHH), so no client can end a log line or forge the next one.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace uniprefill::server {

// At most `max_bytes` of the input are escaped; longer input ends with "...".
std::string EscapeForLog(std::string_view text, size_t max_bytes = 512);

}  // namespace uniprefill::server
