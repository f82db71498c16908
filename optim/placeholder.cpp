// placeholder so the library has a source until its first file lands
namespace hz { namespace optim_placeholder { int unused = 0; } }
