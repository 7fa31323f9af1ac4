# Source this on the device machine (repository root) to use Vulkan there: it unpacks the carried .debs
# (.gl: the libglvnd set; .vk: Debian 13's Vulkan loader, headers, SPIR-V headers and glslc, newer than the
# image's) and exports the loader and driver variables, plus VKARGS for a CMake build of ggml's Vulkan backend.
for f in .gl/*.deb; do dpkg -x "$f" /; done
mkdir -p /opt/vk && for f in .vk/*.deb; do dpkg -x "$f" /opt/vk; done
VK=/opt/vk/usr; VKLIB=$VK/lib/x86_64-linux-gnu
export LD_LIBRARY_PATH=$VKLIB:${LD_LIBRARY_PATH:-}
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
export __EGL_VENDOR_LIBRARY_FILENAMES=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
ldconfig
export VKARGS="-DGGML_VULKAN=ON -DCMAKE_PREFIX_PATH=$VK -DVulkan_INCLUDE_DIR=$VK/include \
 -DVulkan_LIBRARY=$VKLIB/libvulkan.so.1 -DVulkan_GLSLC_EXECUTABLE=$VK/bin/glslc -DCMAKE_CXX_FLAGS=-I$VK/include"
