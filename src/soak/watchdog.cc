#include "soak/watchdog.h"

#include <cxxabi.h>
#include <dirent.h>
#include <dlfcn.h>
#include <execinfo.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>
#include <vector>

namespace gemma::soak {
namespace {

using json = nlohmann::json;

constexpr int kMaxFrames = 48;

// One thread's stack at a time: the reporting thread names the thread, signals it, and waits.
struct Capture {
  std::atomic<pid_t> tid{0};
  void* frames[kMaxFrames];
  std::atomic<int> count{-1};
};
Capture g_capture;

pid_t ThisThread() { return static_cast<pid_t>(syscall(SYS_gettid)); }

void OnStackSignal(int) {
  const int saved = errno;
  if (ThisThread() == g_capture.tid.load(std::memory_order_acquire)) {
    const int n = backtrace(g_capture.frames, kMaxFrames);
    g_capture.count.store(n, std::memory_order_release);
  }
  errno = saved;
}

int StackSignal() { return SIGRTMIN + 4; }

std::string ReadFirstLine(const std::string& path) {
  std::ifstream f(path);
  std::string s;
  std::getline(f, s);
  return s;
}

json Frames(void* const* frames, int n) {
  json out = json::array();
  for (int i = 0; i < n; ++i) {
    Dl_info info{};
    std::ostringstream s;
    if (dladdr(frames[i], &info) && info.dli_fname) {
      const auto off = reinterpret_cast<uintptr_t>(frames[i]) -
                       reinterpret_cast<uintptr_t>(info.dli_fbase);
      s << info.dli_fname << "+0x" << std::hex << off;
      if (info.dli_sname) {
        int status = 0;
        char* d = abi::__cxa_demangle(info.dli_sname, nullptr, nullptr, &status);
        s << ' ' << (status == 0 && d ? d : info.dli_sname);
        std::free(d);
      }
    } else {
      s << frames[i];
    }
    out.push_back(s.str());
  }
  return out;
}

}  // namespace

json ThreadReport() {
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  static const bool installed = [] {
    void* warm[2];
    backtrace(warm, 2);  // (loads the unwinder now: not inside a signal handler)
    struct sigaction sa {};
    sa.sa_handler = OnStackSignal;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    return sigaction(StackSignal(), &sa, nullptr) == 0;
  }();
  const double tick = static_cast<double>(sysconf(_SC_CLK_TCK));
  json threads = json::array();
  std::vector<pid_t> tids;
  if (DIR* d = opendir("/proc/self/task")) {
    while (dirent* e = readdir(d)) {
      if (e->d_name[0] != '.') tids.push_back(static_cast<pid_t>(std::atoi(e->d_name)));
    }
    closedir(d);
  }
  for (pid_t tid : tids) {
    const std::string dir = "/proc/self/task/" + std::to_string(tid);
    json t = {{"tid", tid}, {"name", ReadFirstLine(dir + "/comm")}};
    // stat: "tid (name) state ppid ...": fields after the name's closing parenthesis; utime and
    // stime are the 14th and 15th fields of the whole line.
    const std::string stat = ReadFirstLine(dir + "/stat");
    const size_t close = stat.rfind(')');
    if (close != std::string::npos) {
      std::istringstream rest(stat.substr(close + 2));
      std::vector<std::string> f;
      for (std::string x; rest >> x;) f.push_back(x);
      if (f.size() > 12) {
        t["state"] = f[0];
        t["user_s"] = std::stod(f[11]) / tick;
        t["system_s"] = std::stod(f[12]) / tick;
      }
    }
    t["wchan"] = ReadFirstLine(dir + "/wchan");
    if (tid == ThisThread()) {
      void* frames[kMaxFrames];
      t["stack"] = Frames(frames, backtrace(frames, kMaxFrames));
    } else if (installed) {
      g_capture.count.store(-1, std::memory_order_relaxed);
      g_capture.tid.store(tid, std::memory_order_release);
      if (syscall(SYS_tgkill, getpid(), tid, StackSignal()) == 0) {
        const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(200);
        while (g_capture.count.load(std::memory_order_acquire) < 0 &&
               std::chrono::steady_clock::now() < until) {
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
      }
      const int n = g_capture.count.load(std::memory_order_acquire);
      g_capture.tid.store(0, std::memory_order_release);
      if (n >= 0) {
        t["stack"] = Frames(g_capture.frames, n);
      } else {
        t["stack_missing"] = "the thread did not answer the signal within 200 ms";
      }
    }
    threads.push_back(std::move(t));
  }
  return threads;
}

struct StepWatchdog::State {
  double timeout_s;
  OnHang on_hang;
  std::mutex mu;
  std::condition_variable cv;
  bool stop = false, active = false, fired = false;
  int64_t step = 0;
  std::string scenario;
  std::chrono::steady_clock::time_point began;
  std::thread thread;
};

StepWatchdog::StepWatchdog(double timeout_s, OnHang on_hang) : s_(new State) {
  s_->timeout_s = timeout_s;
  s_->on_hang = std::move(on_hang);
  if (!(timeout_s > 0)) return;
  s_->thread = std::thread([s = s_] {
    std::unique_lock<std::mutex> lock(s->mu);
    const auto limit = std::chrono::duration_cast<std::chrono::steady_clock::duration>(
        std::chrono::duration<double>(s->timeout_s));
    while (!s->stop) {
      if (!s->active || s->fired) {
        s->cv.wait(lock);
        continue;
      }
      const auto deadline = s->began + limit;
      if (std::chrono::steady_clock::now() < deadline) {
        s->cv.wait_until(lock, deadline);
        continue;
      }
      s->fired = true;
      const int64_t step = s->step;
      const std::string scenario = s->scenario;
      const double seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - s->began).count();
      lock.unlock();
      s->on_hang(step, scenario, seconds);
      lock.lock();
    }
  });
}

StepWatchdog::~StepWatchdog() {
  {
    std::lock_guard<std::mutex> lock(s_->mu);
    s_->stop = true;
  }
  s_->cv.notify_all();
  if (s_->thread.joinable()) s_->thread.join();
  delete s_;
}

void StepWatchdog::Begin(int64_t step, const std::string& scenario) {
  {
    std::lock_guard<std::mutex> lock(s_->mu);
    s_->active = true;
    s_->step = step;
    s_->scenario = scenario;
    s_->began = std::chrono::steady_clock::now();
  }
  s_->cv.notify_all();
}

bool StepWatchdog::End() {
  std::lock_guard<std::mutex> lock(s_->mu);
  s_->active = false;
  return s_->fired;
}

}  // namespace gemma::soak
