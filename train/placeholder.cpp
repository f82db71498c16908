// placeholder so the library has a source until its first file lands
namespace hz { namespace train_placeholder { int unused = 0; } }
