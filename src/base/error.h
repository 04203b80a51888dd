// Errors: hark reports every failure as a hark::Error with a message that names what was wrong
// and where (file, offset, key). The CLI prints it as one line; the C API turns it into a code.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace hark {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A device (GPU) allocation that did not fit: callers that can do the work in smaller pieces
// (a smaller batch) catch this one.
class OutOfMemory : public Error {
 public:
  using Error::Error;
};

// fail("tensor ", name, " has ", n, " elements") throws hark::Error with the parts joined.
template <class... Parts>
[[noreturn]] void fail(const Parts&... parts) {
  std::ostringstream message;
  (message << ... << parts);
  throw Error(message.str());
}

}  // namespace hark
