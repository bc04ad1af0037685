// How the CLI reports a failure: one line saying what went wrong, never a C++ stack trace (LibTorch's
// c10::Error carries one; ZEST_DEBUG=1 keeps it), and allocation failures said as "out of memory".
#pragma once

#include <exception>
#include <string>

namespace zest {

// True when ZEST_DEBUG is set to something other than "" or "0": errors then keep LibTorch's trace.
bool debug_traces_enabled();

// Stops LibTorch from capturing a stack trace for every c10::Error (unless debug traces are on):
// capturing one allocates and symbolizes, which is slow and, under a memory limit, can itself crash.
// Call once at the start of main.
void install_error_reporting();

// The one-line text of an error: c10::Error without its trace (with it under ZEST_DEBUG=1), an
// allocation failure as "out of memory: ..." with the size that did not fit, anything else its what();
// a message longer than a few thousand characters (a huge value echoed back) is cut in the middle.
// Every line zest prints of an error goes through it: control characters (C0 but newline and tab, DEL,
// C1) become \xNN, whatever the message quotes.
std::string describe_error(const std::exception& error);

// `text` with C0 controls (but newline and tab), DEL and C1 controls as \xNN; backslashes and printable
// UTF-8 kept (so text escaped once by printable() reads the same). For notes that quote a stranger's file.
std::string terminal_safe(const std::string& text);

// True for an allocation failure (std::bad_alloc, or LibTorch's allocator refusing a size).
bool is_out_of_memory(const std::exception& error);

}  // namespace zest
