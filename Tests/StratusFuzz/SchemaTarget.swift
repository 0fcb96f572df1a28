import StratusCore

/// The `.ckdb` schema language: any text is parsed or refused with a position (never a crash),
/// and what parses prints back to text that parses to the same schema. A deploy plan from the
/// parsed schema to itself changes nothing, and from nothing to it refuses nothing.
enum SchemaTarget {
    static func run(_ bytes: [UInt8]) {
        let text = String(decoding: bytes, as: UTF8.self)
        let schema: Schema
        do {
            schema = try SchemaLanguage.parse(text)
        } catch {
            guard error.description.contains(":") else { FuzzFailure.fail("a schema error without a position: \(error.description)") }
            return
        }
        let printed = SchemaLanguage.print(schema)
        let again: Schema
        do {
            again = try SchemaLanguage.parse(printed)
        } catch {
            FuzzFailure.fail("a printed schema does not parse (\(error.description)):\n\(printed.prefix(2000))")
        }
        guard again.sameDefinition(as: schema) else { FuzzFailure.fail("a printed schema parses to another schema:\n\(printed.prefix(2000))") }
        guard SchemaPlan.between(production: schema, development: schema).changes.isEmpty else {
            FuzzFailure.fail("a deploy of a schema onto itself plans changes:\n\(printed.prefix(2000))")
        }
        let fromNothing = SchemaPlan.between(production: Schema(), development: schema)
        guard fromNothing.refused.isEmpty else { FuzzFailure.fail("a first deploy refuses \(fromNothing.refused.count) changes:\n\(printed.prefix(2000))") }
    }
}
