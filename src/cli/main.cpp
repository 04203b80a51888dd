// The `hark` command line (being built; see src/cli/).
#include <cstdio>

int main() {
  std::puts("hark " HARK_VERSION);
  return 0;
}
