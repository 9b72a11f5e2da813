// A file's whole contents as one string, for tests that read what the
// library wrote (trace files, merged summaries).

#ifndef DISTKIT_TESTING_CC_FILE_CONTENTS_H_
#define DISTKIT_TESTING_CC_FILE_CONTENTS_H_

#include <fstream>
#include <sstream>
#include <string>

namespace distkit {
namespace testing {

// The bytes of the file at `path`; empty when it cannot be read (the
// caller's check on the contents then fails, naming what it expected).
inline std::string FileContents(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace testing
}  // namespace distkit

#endif  // DISTKIT_TESTING_CC_FILE_CONTENTS_H_
