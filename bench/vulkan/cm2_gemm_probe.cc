// The device's workgroup-scope matrix GEMM rates (VK_NV_cooperative_matrix2), alone: C[N][M] =
// A[M][K] . B[N][K]^T at E2B's prompt shapes under several workgroup tiles, f16 (f32 sums), int8
// (int32 sums) and packed int4 / int2 weights decoded at load (cm2_gemm_probe.comp built four
// ways), each checked on sampled outputs against double sums. Prints the extension's features,
// properties and flexible-dimension list first. A raw Vulkan program beside the backend (issue 46:
// what the extension can reach before the kernels use it; bench/journal/2026-12-06-linear-cm2.md).
//   cm2_gemm_probe F16.spv I8.spv I4.spv I2.spv [WG,BM,BN,BK ...]
#include <vulkan/vulkan.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#define CK(x)                                                         \
  do {                                                                \
    VkResult r_ = (x);                                                \
    if (r_ != VK_SUCCESS) {                                           \
      std::printf("FAIL %s = %d (line %d)\n", #x, int(r_), __LINE__); \
      std::exit(1);                                                   \
    }                                                                 \
  } while (0)

struct Cm2Features {
  VkStructureType sType = VkStructureType(1000593000);
  void* pNext = nullptr;
  VkBool32 wg = 0, flex = 0, red = 0, conv = 0, per_elem = 0, tensor = 0, block = 0;
};
struct Cm2Props {
  VkStructureType sType = VkStructureType(1000593002);
  void* pNext = nullptr;
  uint32_t max_wg = 0, max_dim = 0, reserved_smem = 0;
};
struct FlexProps {
  VkStructureType sType = VkStructureType(1000593001);
  void* pNext = nullptr;
  uint32_t mg = 0, ng = 0, kg = 0;
  uint32_t at = 0, bt = 0, ct = 0, rt = 0;
  VkBool32 sat = 0;
  uint32_t scope = 0, wgi = 0;
};
struct KhrFeatures {
  VkStructureType sType = VkStructureType(1000506000);
  void* pNext = nullptr;
  VkBool32 cm = 0, robust = 0;
};

std::vector<uint32_t> ReadSpv(const char* path) {
  std::ifstream f(path, std::ios::binary);
  std::vector<char> b((std::istreambuf_iterator<char>(f)), {});
  std::vector<uint32_t> w(b.size() / 4);
  std::memcpy(w.data(), b.data(), w.size() * 4);
  return w;
}

uint16_t ToHalf(float f) {  // round to nearest (normal range only)
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint32_t s = (u >> 16) & 0x8000u;
  int e = int((u >> 23) & 255) - 127 + 15;
  uint32_t m = u & 0x7FFFFFu;
  if (e <= 0) return uint16_t(s);
  uint32_t h = s | (uint32_t(e) << 10) | (m >> 13);
  const uint32_t rem = m & 0x1FFFu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1))) ++h;
  return uint16_t(h);
}
float FromHalf(uint16_t h) {
  const uint32_t s = uint32_t(h & 0x8000u) << 16, e = (h >> 10) & 31, m = h & 1023;
  uint32_t u = e == 0 ? s : s | ((e - 15 + 127) << 23) | (m << 13);
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

struct Ctx {
  VkInstance inst;
  VkPhysicalDevice pd;
  VkDevice dev;
  VkQueue q;
  uint32_t qf = 0;
  VkPhysicalDeviceMemoryProperties mp;
  float ts_period = 1;
};

uint32_t MemType(Ctx& c, uint32_t bits, VkMemoryPropertyFlags want) {
  for (uint32_t i = 0; i < c.mp.memoryTypeCount; ++i)
    if ((bits >> i & 1) && (c.mp.memoryTypes[i].propertyFlags & want) == want) return i;
  std::printf("no memory type\n");
  std::exit(1);
}

struct Buf {
  VkBuffer b;
  VkDeviceMemory m;
  size_t size;
  void* map = nullptr;
};
Buf MakeBuf(Ctx& c, size_t size, bool host) {
  Buf r{};
  r.size = size;
  VkBufferCreateInfo bi{VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO};
  bi.size = size;
  bi.usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT |
             VK_BUFFER_USAGE_TRANSFER_DST_BIT;
  CK(vkCreateBuffer(c.dev, &bi, nullptr, &r.b));
  VkMemoryRequirements req;
  vkGetBufferMemoryRequirements(c.dev, r.b, &req);
  VkMemoryAllocateInfo ai{VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO};
  ai.allocationSize = req.size;
  ai.memoryTypeIndex =
      MemType(c, req.memoryTypeBits,
              host ? VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT
                   : VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT);
  CK(vkAllocateMemory(c.dev, &ai, nullptr, &r.m));
  CK(vkBindBufferMemory(c.dev, r.b, r.m, 0));
  if (host) CK(vkMapMemory(c.dev, r.m, 0, size, 0, &r.map));
  return r;
}

int main(int argc, char** argv) {
  if (argc < 5) return 2;
  Ctx c;
  VkApplicationInfo app{VK_STRUCTURE_TYPE_APPLICATION_INFO};
  app.apiVersion = VK_API_VERSION_1_3;
  VkInstanceCreateInfo ici{VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO};
  ici.pApplicationInfo = &app;
  CK(vkCreateInstance(&ici, nullptr, &c.inst));
  uint32_t n = 0;
  vkEnumeratePhysicalDevices(c.inst, &n, nullptr);
  std::vector<VkPhysicalDevice> pds(n);
  vkEnumeratePhysicalDevices(c.inst, &n, pds.data());
  c.pd = pds[0];
  VkPhysicalDeviceProperties props;
  vkGetPhysicalDeviceProperties(c.pd, &props);
  c.ts_period = props.limits.timestampPeriod;
  std::printf("device %s driver %u.%u api %u.%u.%u\n", props.deviceName, props.driverVersion >> 22,
              (props.driverVersion >> 14) & 255, VK_VERSION_MAJOR(props.apiVersion),
              VK_VERSION_MINOR(props.apiVersion), VK_VERSION_PATCH(props.apiVersion));
  vkGetPhysicalDeviceMemoryProperties(c.pd, &c.mp);
  vkEnumerateDeviceExtensionProperties(c.pd, nullptr, &n, nullptr);
  std::vector<VkExtensionProperties> exts(n);
  vkEnumerateDeviceExtensionProperties(c.pd, nullptr, &n, exts.data());
  bool has_cm2 = false, has_khr = false;
  for (auto& e : exts) {
    if (!std::strcmp(e.extensionName, "VK_NV_cooperative_matrix2")) has_cm2 = true;
    if (!std::strcmp(e.extensionName, "VK_KHR_cooperative_matrix")) has_khr = true;
    if (std::strstr(e.extensionName, "cooperative") || std::strstr(e.extensionName, "bfloat"))
      std::printf("ext %s v%u\n", e.extensionName, e.specVersion);
  }
  if (!has_cm2 || !has_khr) {
    std::printf("no cm2 (%d) or khr (%d)\n", has_cm2, has_khr);
    return 1;
  }
  Cm2Features cm2f;
  KhrFeatures khrf;
  VkPhysicalDeviceVulkan11Features v11{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES};
  VkPhysicalDeviceVulkan12Features v12{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES};
  VkPhysicalDeviceVulkan13Features v13{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_3_FEATURES};
  VkPhysicalDeviceFeatures2 f2{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2};
  f2.pNext = &v11;
  v11.pNext = &v12;
  v12.pNext = &v13;
  v13.pNext = &khrf;
  khrf.pNext = &cm2f;
  vkGetPhysicalDeviceFeatures2(c.pd, &f2);
  std::printf("cm2 features: wg %u flex %u red %u conv %u perelem %u tensor %u block %u\n", cm2f.wg,
              cm2f.flex, cm2f.red, cm2f.conv, cm2f.per_elem, cm2f.tensor, cm2f.block);
  Cm2Props cm2p;
  VkPhysicalDeviceProperties2 p2{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2};
  p2.pNext = &cm2p;
  vkGetPhysicalDeviceProperties2(c.pd, &p2);
  std::printf("cm2 props: max wg %u max dim %u reserved smem %u\n", cm2p.max_wg, cm2p.max_dim,
              cm2p.reserved_smem);
  using FlexFn = VkResult(VKAPI_PTR*)(VkPhysicalDevice, uint32_t*, FlexProps*);
  auto flex_fn = reinterpret_cast<FlexFn>(vkGetInstanceProcAddr(
      c.inst, "vkGetPhysicalDeviceCooperativeMatrixFlexibleDimensionsPropertiesNV"));
  if (flex_fn) {
    uint32_t fn = 0;
    flex_fn(c.pd, &fn, nullptr);
    std::vector<FlexProps> fp(fn);
    flex_fn(c.pd, &fn, fp.data());
    for (auto& q : fp)
      std::printf("flex: gran %u %u %u types A %u B %u C %u R %u sat %u scope %u wgi %u\n", q.mg,
                  q.ng, q.kg, q.at, q.bt, q.ct, q.rt, q.sat, q.scope, q.wgi);
  }
  // queue
  vkGetPhysicalDeviceQueueFamilyProperties(c.pd, &n, nullptr);
  std::vector<VkQueueFamilyProperties> qfs(n);
  vkGetPhysicalDeviceQueueFamilyProperties(c.pd, &n, qfs.data());
  for (uint32_t i = 0; i < n; ++i)
    if (qfs[i].queueFlags & VK_QUEUE_COMPUTE_BIT) {
      c.qf = i;
      break;
    }
  float prio = 1;
  VkDeviceQueueCreateInfo qci{VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO};
  qci.queueFamilyIndex = c.qf;
  qci.queueCount = 1;
  qci.pQueuePriorities = &prio;
  const char* en[] = {"VK_KHR_cooperative_matrix", "VK_NV_cooperative_matrix2"};
  VkDeviceCreateInfo dci{VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO};
  khrf.robust = 0;
  dci.pNext = &f2;
  dci.queueCreateInfoCount = 1;
  dci.pQueueCreateInfos = &qci;
  dci.enabledExtensionCount = 2;
  dci.ppEnabledExtensionNames = en;
  CK(vkCreateDevice(c.pd, &dci, nullptr, &c.dev));
  vkGetDeviceQueue(c.dev, c.qf, 0, &c.q);

  VkCommandPoolCreateInfo pci{VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO};
  pci.flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT;
  pci.queueFamilyIndex = c.qf;
  VkCommandPool pool;
  CK(vkCreateCommandPool(c.dev, &pci, nullptr, &pool));
  VkCommandBufferAllocateInfo cai{VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO};
  cai.commandPool = pool;
  cai.commandBufferCount = 1;
  VkCommandBuffer cb;
  CK(vkAllocateCommandBuffers(c.dev, &cai, &cb));
  VkQueryPoolCreateInfo qpi{VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO};
  qpi.queryType = VK_QUERY_TYPE_TIMESTAMP;
  qpi.queryCount = 2;
  VkQueryPool qp;
  CK(vkCreateQueryPool(c.dev, &qpi, nullptr, &qp));
  auto submit = [&]() {
    VkSubmitInfo si{VK_STRUCTURE_TYPE_SUBMIT_INFO};
    si.commandBufferCount = 1;
    si.pCommandBuffers = &cb;
    CK(vkQueueSubmit(c.q, 1, &si, VK_NULL_HANDLE));
    CK(vkQueueWaitIdle(c.q));
  };

  // descriptor layout: 3 storage buffers
  VkDescriptorSetLayoutBinding bs[3];
  for (int i = 0; i < 3; ++i)
    bs[i] = {uint32_t(i), VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, 1, VK_SHADER_STAGE_COMPUTE_BIT,
             nullptr};
  VkDescriptorSetLayoutCreateInfo dli{VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO};
  dli.bindingCount = 3;
  dli.pBindings = bs;
  VkDescriptorSetLayout dsl;
  CK(vkCreateDescriptorSetLayout(c.dev, &dli, nullptr, &dsl));
  VkPushConstantRange pcr{VK_SHADER_STAGE_COMPUTE_BIT, 0, 12};
  VkPipelineLayoutCreateInfo pli{VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO};
  pli.setLayoutCount = 1;
  pli.pSetLayouts = &dsl;
  pli.pushConstantRangeCount = 1;
  pli.pPushConstantRanges = &pcr;
  VkPipelineLayout pl;
  CK(vkCreatePipelineLayout(c.dev, &pli, nullptr, &pl));
  VkDescriptorPoolSize ps{VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, 3};
  VkDescriptorPoolCreateInfo dpi{VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO};
  dpi.maxSets = 1;
  dpi.poolSizeCount = 1;
  dpi.pPoolSizes = &ps;
  VkDescriptorPool dp;
  CK(vkCreateDescriptorPool(c.dev, &dpi, nullptr, &dp));
  VkDescriptorSetAllocateInfo dsai{VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO};
  dsai.descriptorPool = dp;
  dsai.descriptorSetCount = 1;
  dsai.pSetLayouts = &dsl;
  VkDescriptorSet ds;
  CK(vkAllocateDescriptorSets(c.dev, &dsai, &ds));

  const size_t kMax = size_t(12288) * 6144;  // elements of the largest operand
  Buf da = MakeBuf(c, kMax * 2, false), db = MakeBuf(c, size_t(4096) * 6144 * 2, false),
      dc = MakeBuf(c, size_t(4096) * 12288 * 4, false);
  Buf stage = MakeBuf(c, kMax * 2, true);
  VkDescriptorBufferInfo dbi[3] = {
      {da.b, 0, VK_WHOLE_SIZE}, {db.b, 0, VK_WHOLE_SIZE}, {dc.b, 0, VK_WHOLE_SIZE}};
  VkWriteDescriptorSet w[3];
  for (int i = 0; i < 3; ++i) {
    w[i] = {VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET};
    w[i].dstSet = ds;
    w[i].dstBinding = i;
    w[i].descriptorCount = 1;
    w[i].descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
    w[i].pBufferInfo = &dbi[i];
  }
  vkUpdateDescriptorSets(c.dev, 3, w, 0, nullptr);

  auto begin = [&]() {
    VkCommandBufferBeginInfo bi{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
    bi.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
    CK(vkBeginCommandBuffer(cb, &bi));
  };
  auto copy = [&](Buf& dst, size_t bytes, bool down) {  // stage <-> dst
    begin();
    VkBufferCopy r{0, 0, bytes};
    if (down)
      vkCmdCopyBuffer(cb, dst.b, stage.b, 1, &r);
    else
      vkCmdCopyBuffer(cb, stage.b, dst.b, 1, &r);
    CK(vkEndCommandBuffer(cb));
    submit();
  };

  struct Shape {
    const char* name;
    uint32_t M, K, N;
  };
  const Shape shapes[] = {
      {"q 2048x1536 n1024", 2048, 1536, 1024},        {"gate 6144x1536 n1024", 6144, 1536, 1024},
      {"gate2x 12288x1536 n1024", 12288, 1536, 1024}, {"down 1536x6144 n1024", 1536, 6144, 1024},
      {"tower qkvo 768x768 n2520", 768, 768, 2520},   {"tower up 3072x768 n2520", 3072, 768, 2520},
      {"tower down 768x3072 n2520", 768, 3072, 2520}, {"big 4096x4096 n4096", 4096, 4096, 4096}};
  struct Tile {
    uint32_t wg, bm, bn, bk;
  };
  std::vector<Tile> tiles = {{256, 128, 128, 32}, {256, 128, 128, 64}, {256, 128, 256, 32},
                             {256, 256, 128, 32}, {128, 64, 128, 32},  {256, 64, 128, 64},
                             {256, 128, 64, 64}};
  if (argc > 5) {
    tiles.clear();
    for (int i = 5; i < argc; ++i) {
      Tile t;
      if (std::sscanf(argv[i], "%u,%u,%u,%u", &t.wg, &t.bm, &t.bn, &t.bk) == 4) tiles.push_back(t);
    }
  }
  const char* mode_names[4] = {"f16", "i8 ", "i4 ", "i2 "};
  for (int mode = 0; mode < 4; ++mode) {
    std::vector<uint32_t> spv = ReadSpv(argv[1 + mode]);
    if (spv.empty()) continue;
    const bool i8 = mode >= 1;
    const int pack = mode == 2 ? 4 : mode == 3 ? 2 : 0;
    VkShaderModuleCreateInfo smi{VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO};
    smi.codeSize = spv.size() * 4;
    smi.pCode = spv.data();
    VkShaderModule sm;
    CK(vkCreateShaderModule(c.dev, &smi, nullptr, &sm));
    for (const Shape& s : shapes) {
      // inputs: A values, B values (f16 in [-1, 1) or int8 in [-8, 7] / [-127, 127])
      uint32_t rng = 12345;
      auto next = [&]() { return (rng = rng * 1664525u + 1013904223u) >> 8; };
      std::vector<float> fa(size_t(s.M) * s.K), fb(size_t(s.N) * s.K);
      for (float& v : fa)
        v = pack ? float(int(next() % (1u << pack)) - (1 << (pack - 1)))
            : i8 ? float(int(next() % 16) - 8)
                 : FromHalf(ToHalf((next() % 2001) / 1000.0f - 1.0f));
      for (float& v : fb)
        v = i8 ? float(int(next() % 255) - 127)
               : FromHalf(ToHalf((next() % 2001) / 1000.0f - 1.0f));
      auto upload = [&](const std::vector<float>& f, Buf& dst) {
        if (i8) {
          int8_t* p = static_cast<int8_t*>(stage.map);
          for (size_t i = 0; i < f.size(); ++i) p[i] = int8_t(f[i]);
          copy(dst, f.size(), false);
        } else {
          uint16_t* p = static_cast<uint16_t*>(stage.map);
          for (size_t i = 0; i < f.size(); ++i) p[i] = ToHalf(f[i]);
          copy(dst, f.size() * 2, false);
        }
      };
      if (pack) {
        const uint32_t per = 32 / pack;
        uint32_t* p = static_cast<uint32_t*>(stage.map);
        const size_t words = size_t(s.M) * s.K / per;
        for (size_t wi = 0; wi < words; ++wi) {
          uint32_t wv = 0;
          for (uint32_t j = 0; j < per; ++j)
            wv |= uint32_t(int(fa[wi * per + j]) + (1 << (pack - 1))) << (pack * j);
          p[wi] = wv;
        }
        copy(da, words * 4, false);
      } else {
        upload(fa, da);
      }
      upload(fb, db);
      for (const Tile& t : tiles) {
        uint32_t sc[4] = {t.wg, t.bm, t.bn, t.bk};
        VkSpecializationMapEntry me[4];
        for (int i = 0; i < 4; ++i) me[i] = {uint32_t(i), uint32_t(4 * i), 4};
        VkSpecializationInfo spi{4, me, sizeof(sc), sc};
        VkComputePipelineCreateInfo cpi{VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO};
        cpi.stage = {VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO};
        cpi.stage.stage = VK_SHADER_STAGE_COMPUTE_BIT;
        cpi.stage.module = sm;
        cpi.stage.pName = "main";
        cpi.stage.pSpecializationInfo = &spi;
        cpi.layout = pl;
        VkPipeline pipe;
        const auto t0 = std::chrono::steady_clock::now();
        VkResult pr = vkCreateComputePipelines(c.dev, VK_NULL_HANDLE, 1, &cpi, nullptr, &pipe);
        const double compile_ms =
            std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
                .count();
        if (pr != VK_SUCCESS) {
          std::printf("%s %s tile %u/%ux%ux%u: pipeline failed %d\n", mode_names[mode], s.name,
                      t.wg, t.bm, t.bn, t.bk, int(pr));
          continue;
        }
        const uint32_t push[3] = {s.M, s.N, s.K};
        auto run = [&](int reps) {
          begin();
          vkCmdResetQueryPool(cb, qp, 0, 2);
          vkCmdBindPipeline(cb, VK_PIPELINE_BIND_POINT_COMPUTE, pipe);
          vkCmdBindDescriptorSets(cb, VK_PIPELINE_BIND_POINT_COMPUTE, pl, 0, 1, &ds, 0, nullptr);
          vkCmdPushConstants(cb, pl, VK_SHADER_STAGE_COMPUTE_BIT, 0, 12, push);
          vkCmdWriteTimestamp(cb, VK_PIPELINE_STAGE_TOP_OF_PIPE_BIT, qp, 0);
          for (int r = 0; r < reps; ++r) {
            vkCmdDispatch(cb, (s.N + t.bn - 1) / t.bn, (s.M + t.bm - 1) / t.bm, 1);
            VkMemoryBarrier mb{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
            mb.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT;
            mb.dstAccessMask = VK_ACCESS_SHADER_WRITE_BIT;
            vkCmdPipelineBarrier(cb, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT,
                                 VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, 0, 1, &mb, 0, nullptr, 0,
                                 nullptr);
          }
          vkCmdWriteTimestamp(cb, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, qp, 1);
          CK(vkEndCommandBuffer(cb));
          submit();
          uint64_t ts[2];
          CK(vkGetQueryPoolResults(c.dev, qp, 0, 2, sizeof(ts), ts, 8,
                                   VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT));
          return double(ts[1] - ts[0]) * c.ts_period * 1e-3 / reps;  // us per dispatch
        };
        run(1);
        // correctness on sampled outputs
        copy(dc, size_t(s.N) * s.M * 4, true);
        double num = 0, den = 0;
        long bad = 0;
        for (uint32_t tt = 0; tt < s.N; tt += 97)
          for (uint32_t row = 0; row < s.M; row += 61) {
            double want = 0;
            for (uint32_t k = 0; k < s.K; ++k)
              want += double(fa[size_t(row) * s.K + k]) * fb[size_t(tt) * s.K + k];
            double got;
            if (i8)
              got = double(static_cast<int32_t*>(stage.map)[size_t(tt) * s.M + row]);
            else
              got = static_cast<float*>(stage.map)[size_t(tt) * s.M + row];
            num += (got - want) * (got - want);
            den += want * want;
            if (i8 && got != want) ++bad;
          }
        const auto w0 = std::chrono::steady_clock::now();
        while (std::chrono::steady_clock::now() - w0 < std::chrono::milliseconds(300)) run(20);
        std::vector<double> us;
        for (int i = 0; i < 5; ++i) us.push_back(run(20));
        std::sort(us.begin(), us.end());
        const double flop = 2.0 * s.M * s.K * s.N;
        std::printf(
            "%s %-26s tile %3u/%3ux%3ux%2u: %8.1f us %6.1f TFLOP/s  relL2 %.2e%s  (compile %.0f "
            "ms)\n",
            mode_names[mode], s.name, t.wg, t.bm, t.bn, t.bk, us[2], flop / (us[2] * 1e-6) * 1e-12,
            std::sqrt(num / std::max(den, 1e-30)), i8 ? (bad ? " MISMATCH" : " exact") : "",
            compile_ms);
        std::fflush(stdout);
        vkDestroyPipeline(c.dev, pipe, nullptr);
      }
    }
  }
  return 0;
}
